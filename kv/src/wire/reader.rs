//! A bounds-checked msgpack cursor over a payload: every read checks the remaining length first,
//! every declared length is checked against what is left, so no input can make it panic or
//! allocate more than the payload's size.

use rmp::Marker;

use super::error::{Location, WireError};

/// How deep [`Reader::skip`] follows nested values (in ignored fields).
pub(crate) const MAX_SKIP_DEPTH: usize = 32;

/// A cursor over one payload.
#[derive(Debug)]
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

/// The name of a marker's msgpack type, for errors.
pub(crate) fn type_name(m: Marker) -> &'static str {
    match m {
        Marker::FixPos(_) | Marker::FixNeg(_) => "int",
        Marker::U8 | Marker::U16 | Marker::U32 | Marker::U64 => "int",
        Marker::I8 | Marker::I16 | Marker::I32 | Marker::I64 => "int",
        Marker::Null => "nil",
        Marker::True | Marker::False => "bool",
        Marker::F32 | Marker::F64 => "float",
        Marker::FixStr(_) | Marker::Str8 | Marker::Str16 | Marker::Str32 => "str",
        Marker::Bin8 | Marker::Bin16 | Marker::Bin32 => "bin",
        Marker::FixArray(_) | Marker::Array16 | Marker::Array32 => "array",
        Marker::FixMap(_) | Marker::Map16 | Marker::Map32 => "map",
        Marker::FixExt1 | Marker::FixExt2 | Marker::FixExt4 | Marker::FixExt8 | Marker::FixExt16 => "ext",
        Marker::Ext8 | Marker::Ext16 | Marker::Ext32 => "ext",
        Marker::Reserved => "reserved marker 0xc1",
    }
}

impl<'a> Reader<'a> {
    /// A cursor at the start of `buf`.
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    /// Bytes not read yet.
    pub(crate) fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if self.remaining() < n {
            return Err(WireError::Truncated { offset: self.pos, needed: n - self.remaining() });
        }
        let out = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    fn be<const N: usize>(&mut self) -> Result<[u8; N], WireError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    /// The next marker, without consuming it.
    pub(crate) fn peek(&self) -> Result<Marker, WireError> {
        match self.buf.get(self.pos) {
            Some(&b) => Ok(Marker::from_u8(b)),
            None => Err(WireError::Truncated { offset: self.pos, needed: 1 }),
        }
    }

    fn marker(&mut self) -> Result<Marker, WireError> {
        let m = self.peek()?;
        self.pos += 1;
        Ok(m)
    }

    /// Consumes a nil if one is next; whether it did.
    pub(crate) fn nil(&mut self) -> Result<bool, WireError> {
        if self.peek()? == Marker::Null {
            self.pos += 1;
            return Ok(true);
        }
        Ok(false)
    }

    /// A length of `n` elements, each at least one byte: more than the bytes left is truncation.
    fn len_checked(&self, n: usize) -> Result<usize, WireError> {
        if n > self.remaining() {
            return Err(WireError::Truncated { offset: self.pos, needed: n - self.remaining() });
        }
        Ok(n)
    }

    fn len_field(&mut self, m: Marker) -> Result<Option<usize>, WireError> {
        Ok(Some(match m {
            Marker::FixArray(n) | Marker::FixMap(n) | Marker::FixStr(n) => usize::from(n),
            Marker::Str8 | Marker::Bin8 => usize::from(self.be::<1>()?[0]),
            Marker::Array16 | Marker::Map16 | Marker::Str16 | Marker::Bin16 => {
                usize::from(u16::from_be_bytes(self.be()?))
            }
            Marker::Array32 | Marker::Map32 | Marker::Str32 | Marker::Bin32 => {
                u32::from_be_bytes(self.be()?) as usize
            }
            _ => return Ok(None),
        }))
    }

    /// An array header; its length, checked against the bytes left and `cap`.
    pub(crate) fn array(&mut self, at: Location, cap: usize) -> Result<usize, WireError> {
        let m = self.marker()?;
        match m {
            Marker::FixArray(_) | Marker::Array16 | Marker::Array32 => self.container(m, at, cap),
            _ => Err(WireError::Type { at, expected: "array", found: type_name(m) }),
        }
    }

    /// A map header; its number of entries, checked against the bytes left and `cap`.
    pub(crate) fn map(&mut self, at: Location, cap: usize) -> Result<usize, WireError> {
        let m = self.marker()?;
        match m {
            Marker::FixMap(_) | Marker::Map16 | Marker::Map32 => self.container(m, at, cap),
            _ => Err(WireError::Type { at, expected: "map", found: type_name(m) }),
        }
    }

    fn container(&mut self, m: Marker, at: Location, cap: usize) -> Result<usize, WireError> {
        let n = self.len_field(m)?.unwrap_or(0);
        if n > cap {
            return Err(WireError::TooLong { at, len: n, cap });
        }
        self.len_checked(n)
    }

    /// A UTF-8 string.
    pub(crate) fn str(&mut self, at: Location) -> Result<&'a str, WireError> {
        let m = self.marker()?;
        match m {
            Marker::FixStr(_) | Marker::Str8 | Marker::Str16 | Marker::Str32 => {
                let n = self.len_field(m)?.unwrap_or(0);
                let bytes = self.take(n)?;
                std::str::from_utf8(bytes).map_err(|_| WireError::Utf8 { at })
            }
            _ => Err(WireError::Type { at, expected: "str", found: type_name(m) }),
        }
    }

    /// An integer of any msgpack width.
    pub(crate) fn int(&mut self, at: Location) -> Result<i128, WireError> {
        let m = self.marker()?;
        Ok(match m {
            Marker::FixPos(v) => i128::from(v),
            Marker::FixNeg(v) => i128::from(v),
            Marker::U8 => i128::from(self.be::<1>()?[0]),
            Marker::U16 => i128::from(u16::from_be_bytes(self.be()?)),
            Marker::U32 => i128::from(u32::from_be_bytes(self.be()?)),
            Marker::U64 => i128::from(u64::from_be_bytes(self.be()?)),
            Marker::I8 => i128::from(i8::from_be_bytes(self.be()?)),
            Marker::I16 => i128::from(i16::from_be_bytes(self.be()?)),
            Marker::I32 => i128::from(i32::from_be_bytes(self.be()?)),
            Marker::I64 => i128::from(i64::from_be_bytes(self.be()?)),
            _ => return Err(WireError::Type { at, expected: "int", found: type_name(m) }),
        })
    }

    /// A number as `f64` (msgspec writes floats as float64; ints are accepted too).
    pub(crate) fn number(&mut self, at: Location) -> Result<f64, WireError> {
        match self.peek()? {
            Marker::F64 => {
                self.pos += 1;
                Ok(f64::from_be_bytes(self.be()?))
            }
            Marker::F32 => {
                self.pos += 1;
                Ok(f64::from(f32::from_be_bytes(self.be()?)))
            }
            m if type_name(m) == "int" => Ok(self.int(at)? as f64),
            m => Err(WireError::Type { at, expected: "float", found: type_name(m) }),
        }
    }

    /// Skips one value of any type (an ignored field), following at most [`MAX_SKIP_DEPTH`] levels.
    pub(crate) fn skip(&mut self, at: Location) -> Result<(), WireError> {
        // Values still to skip at each open level; iterative, so depth costs no stack.
        let mut pending: Vec<usize> = vec![1];
        while let Some(top) = pending.last_mut() {
            if *top == 0 {
                pending.pop();
                continue;
            }
            *top -= 1;
            let m = self.marker()?;
            let children = match m {
                Marker::FixArray(_) | Marker::Array16 | Marker::Array32 => self.len_field(m)?.unwrap_or(0),
                Marker::FixMap(_) | Marker::Map16 | Marker::Map32 => {
                    self.len_field(m)?.unwrap_or(0).saturating_mul(2)
                }
                _ => {
                    self.skip_scalar(m, at)?;
                    continue;
                }
            };
            self.len_checked(children)?;
            if children > 0 {
                if pending.len() > MAX_SKIP_DEPTH {
                    return Err(WireError::TooDeep { at, max: MAX_SKIP_DEPTH });
                }
                pending.push(children);
            }
        }
        Ok(())
    }

    fn skip_scalar(&mut self, m: Marker, at: Location) -> Result<(), WireError> {
        let n = match m {
            Marker::FixPos(_) | Marker::FixNeg(_) | Marker::Null | Marker::True | Marker::False => 0,
            Marker::U8 | Marker::I8 => 1,
            Marker::U16 | Marker::I16 => 2,
            Marker::U32 | Marker::I32 | Marker::F32 => 4,
            Marker::U64 | Marker::I64 | Marker::F64 => 8,
            Marker::FixExt1 => 2,
            Marker::FixExt2 => 3,
            Marker::FixExt4 => 5,
            Marker::FixExt8 => 9,
            Marker::FixExt16 => 17,
            Marker::Ext8 => usize::from(self.be::<1>()?[0]) + 1,
            Marker::Ext16 => usize::from(u16::from_be_bytes(self.be()?)) + 1,
            Marker::Ext32 => u32::from_be_bytes(self.be()?) as usize + 1,
            Marker::Reserved => {
                return Err(WireError::Type { at, expected: "a msgpack value", found: type_name(m) });
            }
            // Strings and binaries: their length field, then the bytes.
            _ => self.len_field(m)?.unwrap_or(0),
        };
        self.take(n).map(|_| ())
    }
}

//! The identity a client certificate names. Only certificates rustls has verified against
//! `--tls-client-ca` reach here (the connection's handshake required one), so the name is what the
//! CA vouched for. The first of:
//!
//! 1. its first URI subject alternative name (a SPIFFE id, `spiffe://cluster/ns/infera/sa/proxy`);
//! 2. its subject's common name (`CN=proxy-a`, what `openssl req -subj /CN=proxy-a` writes);
//! 3. its first DNS subject alternative name.
//!
//! IP address names are no identity: they say where a peer is, not who.

use rustls::pki_types::CertificateDer;

/// The DER of the common name's attribute type, 2.5.4.3.
const COMMON_NAME: &[u8] = &[0x55, 0x04, 0x03];

/// The name `cert` (a leaf, DER) gives its holder, if any.
pub fn name_of(cert: &CertificateDer<'_>) -> Option<String> {
    let parsed = webpki::EndEntityCert::try_from(cert).ok()?;
    if let Some(uri) = parsed.valid_uri_names().next() {
        return Some(uri.to_owned());
    }
    if let Some(cn) = common_name(parsed.subject()) {
        return Some(cn);
    }
    parsed.valid_dns_names().next().map(str::to_owned)
}

/// One DER element: its tag and its contents, and what follows it.
fn element(der: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = der.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n].iter().fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
        (len, &rest[n..])
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
}

/// The last common name of a subject (`Name`'s contents: a sequence of relative distinguished
/// names, each a set of type-and-value sequences), when it is a UTF-8, printable or IA5 string.
fn common_name(subject: &[u8]) -> Option<String> {
    const SET: u8 = 0x31;
    const SEQUENCE: u8 = 0x30;
    const OID: u8 = 0x06;
    let mut found = None;
    let mut rdns = subject;
    while !rdns.is_empty() {
        let (tag, mut set, rest) = element(rdns)?;
        rdns = rest;
        if tag != SET {
            return None;
        }
        while !set.is_empty() {
            let (tag, pair, rest) = element(set)?;
            set = rest;
            if tag != SEQUENCE {
                return None;
            }
            let (tag, oid, value) = element(pair)?;
            if tag != OID || oid != COMMON_NAME {
                continue;
            }
            let (kind, text, _) = element(value)?;
            // UTF8String, PrintableString, IA5String.
            if matches!(kind, 0x0c | 0x13 | 0x16) {
                found = std::str::from_utf8(text).ok().map(str::to_owned);
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use rcgen::{CertificateParams, DnType, KeyPair, SanType};

    use super::*;

    fn cert(cn: Option<&str>, sans: Vec<SanType>) -> CertificateDer<'static> {
        let mut params = CertificateParams::new(Vec::new()).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.distinguished_name.push(DnType::OrganizationName, "infera");
        if let Some(cn) = cn {
            params.distinguished_name.push(DnType::CommonName, cn);
        }
        params.subject_alt_names = sans;
        params.self_signed(&KeyPair::generate().unwrap()).unwrap().der().clone()
    }

    fn dns(name: &str) -> SanType {
        SanType::DnsName(name.try_into().unwrap())
    }

    #[test]
    fn a_uri_name_comes_first_then_the_common_name_then_a_dns_name() {
        let uri = SanType::URI("spiffe://cluster/ns/infera/sa/proxy".try_into().unwrap());
        let ip = SanType::IpAddress("127.0.0.1".parse().unwrap());
        assert_eq!(
            name_of(&cert(Some("proxy-a"), vec![dns("proxy.test"), uri])).as_deref(),
            Some("spiffe://cluster/ns/infera/sa/proxy")
        );
        assert_eq!(
            name_of(&cert(Some("proxy-a"), vec![dns("proxy.test"), ip.clone()])).as_deref(),
            Some("proxy-a")
        );
        assert_eq!(name_of(&cert(None, vec![ip.clone(), dns("proxy.test")])).as_deref(), Some("proxy.test"));
        assert_eq!(name_of(&cert(None, vec![ip])), None, "an address names nobody");
        assert_eq!(name_of(&CertificateDer::from(vec![0x30, 0x03, 0x01])), None, "not a certificate");
    }

    #[test]
    fn the_subject_reader_takes_long_lengths_and_refuses_truncated_input() {
        // SET { SEQUENCE { OID 2.5.4.3, UTF8String "x" } }
        let rdn = [0x31, 0x0a, 0x30, 0x08, 0x06, 0x03, 0x55, 0x04, 0x03, 0x0c, 0x01, b'x'];
        assert_eq!(common_name(&rdn).as_deref(), Some("x"));
        let long = [0x31, 0x81, 0x0a, 0x30, 0x08, 0x06, 0x03, 0x55, 0x04, 0x03, 0x0c, 0x01, b'y'];
        assert_eq!(common_name(&long).as_deref(), Some("y"));
        assert_eq!(common_name(&rdn[..rdn.len() - 1]), None);
        assert_eq!(common_name(&[]), None);
    }
}

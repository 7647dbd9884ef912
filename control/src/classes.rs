//! Service classes and tenant weights (`--service-classes FILE`, read again on SIGHUP): what a
//! request's class promises (its TTFT and ITL targets, its priority) and each tenant's share of
//! the admission queue. Without a file the defaults apply: `interactive` (TTFT 2 s, ITL 50 ms,
//! priority 1, the default class) and `batch` (TTFT 60 s, ITL 250 ms, priority 0), every tenant
//! weight 1. `manual/features/service_classes.md` documents the file.
//!
//! ```toml
//! default_class = "interactive"
//!
//! [[classes]]
//! name = "interactive"
//! ttft_ms = 2000
//! itl_ms = 50
//! priority = 1
//!
//! [tenants]
//! default_weight = 1
//! weights = { team-a = 3, team-b = 1 }
//! ```

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use infera_proto::types::{ServiceClassName, TenantId};
use serde::Deserialize;

/// The most classes a file may define (each is a label value of control's metrics).
pub const MAX_CLASSES: usize = 16;
/// The most tenants a file may weigh (each is a label value of the admitted-tokens counter).
pub const MAX_TENANTS: usize = 256;

/// What a class promises its requests.
#[derive(Clone, Debug, PartialEq)]
pub struct ServiceClass {
    /// Its name, as requests carry it.
    pub name: ServiceClassName,
    /// Time to first token it is held to: a request still waiting when it can no longer be met
    /// is shed.
    pub ttft: Duration,
    /// Inter-token latency it is held to: no pick may push a worker's predicted step past the
    /// tightest ITL of the requests it holds.
    pub itl: Duration,
    /// Higher goes first at admission (never by preempting a running stream).
    pub priority: u8,
}

/// The classes and tenant weights in force.
#[derive(Clone, Debug, PartialEq)]
pub struct ClassBook {
    classes: Vec<ServiceClass>,
    default: usize,
    weights: HashMap<TenantId, f64>,
    default_weight: f64,
}

/// A class file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ClassFileError {
    /// Unreadable.
    #[error("--service-classes {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// Not a class file.
    #[error("--service-classes {path}: {problem}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        problem: String,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    default_class: Option<String>,
    #[serde(default)]
    classes: Vec<ClassEntry>,
    #[serde(default)]
    tenants: TenantsEntry,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ClassEntry {
    name: String,
    ttft_ms: u64,
    itl_ms: u64,
    #[serde(default)]
    priority: u8,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct TenantsEntry {
    default_weight: Option<f64>,
    #[serde(default)]
    weights: HashMap<String, f64>,
}

impl Default for ClassBook {
    fn default() -> Self {
        let class = |name: &str, ttft_ms, itl_ms, priority| ServiceClass {
            name: ServiceClassName::new(name),
            ttft: Duration::from_millis(ttft_ms),
            itl: Duration::from_millis(itl_ms),
            priority,
        };
        Self {
            classes: vec![class("interactive", 2_000, 50, 1), class("batch", 60_000, 250, 0)],
            default: 0,
            weights: HashMap::new(),
            default_weight: 1.0,
        }
    }
}

impl ClassBook {
    /// Reads `path`.
    ///
    /// # Errors
    /// An unreadable file, bad TOML, or values that make no class book: none or more than
    /// [`MAX_CLASSES`] classes, a repeated or badly formed name, a zero target, a default class it
    /// does not define, a weight that is not positive and finite.
    pub fn load(path: &Path) -> Result<Self, ClassFileError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| ClassFileError::Read { path: path.to_owned(), source })?;
        Self::parse(&text).map_err(|problem| ClassFileError::Invalid { path: path.to_owned(), problem })
    }

    /// Parses a class file's text.
    ///
    /// # Errors
    /// As [`ClassBook::load`], as text.
    pub fn parse(text: &str) -> Result<Self, String> {
        let file: File = toml::from_str(text).map_err(|e| e.to_string())?;
        let defaults = Self::default();
        let classes = if file.classes.is_empty() {
            defaults.classes
        } else {
            file.classes.into_iter().map(class).collect::<Result<Vec<_>, _>>()?
        };
        if classes.len() > MAX_CLASSES {
            return Err(format!("{} classes; at most {MAX_CLASSES}", classes.len()));
        }
        for (i, c) in classes.iter().enumerate() {
            if classes[..i].iter().any(|o| o.name == c.name) {
                return Err(format!("class {:?} is defined twice", c.name.as_str()));
            }
        }
        let default = match file.default_class {
            None => 0,
            Some(name) => classes
                .iter()
                .position(|c| c.name.as_str() == name)
                .ok_or_else(|| format!("default_class {name:?} is not among the classes"))?,
        };
        let weight = |who: &str, w: f64| {
            if w.is_finite() && w > 0.0 {
                Ok(w)
            } else {
                Err(format!("weight of {who}: {w} is not positive"))
            }
        };
        let default_weight = weight("default_weight", file.tenants.default_weight.unwrap_or(1.0))?;
        if file.tenants.weights.len() > MAX_TENANTS {
            return Err(format!("{} tenant weights; at most {MAX_TENANTS}", file.tenants.weights.len()));
        }
        let weights = file
            .tenants
            .weights
            .into_iter()
            .map(|(t, w)| Ok((TenantId::new(t.clone()), weight(&t, w)?)))
            .collect::<Result<_, String>>()?;
        Ok(Self { classes, default, weights, default_weight })
    }

    /// The class a request named (`None`: the default class); `None` when the book has no such
    /// class.
    pub fn class(&self, name: Option<&ServiceClassName>) -> Option<&ServiceClass> {
        match name {
            None => self.classes.get(self.default),
            Some(name) => self.classes.iter().find(|c| &c.name == name),
        }
    }

    /// Every class, the default first.
    pub fn classes(&self) -> impl Iterator<Item = &ServiceClass> {
        self.classes
            .get(self.default)
            .into_iter()
            .chain(self.classes.iter().enumerate().filter(|(i, _)| *i != self.default).map(|(_, c)| c))
    }

    /// What admission holds a request of `class` to: its ITL target, and for a class below the
    /// top priority the top class's TTFT (the tightest among the top classes).
    pub fn limit(&self, class: &ServiceClass) -> crate::admission::AdmitLimit {
        let top = self.classes.iter().map(|c| c.priority).max().unwrap_or(class.priority);
        let protect = self.classes.iter().filter(|c| c.priority == top).map(|c| c.ttft).min();
        crate::admission::AdmitLimit {
            itl_ms: millis(class.itl),
            protect_ttft_ms: protect.filter(|_| class.priority < top).map(millis),
        }
    }

    /// A tenant's weight (`None`: the anonymous tenant), the default weight when the book names
    /// none for it.
    pub fn weight(&self, tenant: Option<&TenantId>) -> f64 {
        tenant.and_then(|t| self.weights.get(t)).copied().unwrap_or(self.default_weight)
    }

    /// Whether the book weighs `tenant` by name (its admitted tokens are then counted under its
    /// own label).
    pub fn names_tenant(&self, tenant: &TenantId) -> bool {
        self.weights.contains_key(tenant)
    }
}

fn millis(d: Duration) -> u32 {
    u32::try_from(d.as_millis()).unwrap_or(u32::MAX)
}

fn class(e: ClassEntry) -> Result<ServiceClass, String> {
    if !ServiceClassName::is_valid(&e.name) {
        return Err(format!("class name {:?}: 1–64 of [A-Za-z0-9._-]", e.name));
    }
    if e.ttft_ms == 0 || e.itl_ms == 0 {
        return Err(format!("class {:?}: ttft_ms and itl_ms must be positive", e.name));
    }
    Ok(ServiceClass {
        name: ServiceClassName::new(e.name),
        ttft: Duration::from_millis(e.ttft_ms),
        itl: Duration::from_millis(e.itl_ms),
        priority: e.priority,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_file_interactive_is_the_default_and_batch_waits_longer() {
        let book = ClassBook::default();
        let default = book.class(None).unwrap();
        assert_eq!(
            (default.name.as_str(), default.ttft, default.itl),
            ("interactive", Duration::from_secs(2), Duration::from_millis(50))
        );
        let batch = book.class(Some(&ServiceClassName::new("batch"))).unwrap();
        assert!(batch.priority < default.priority && batch.ttft > default.ttft);
        assert!(book.class(Some(&ServiceClassName::new("gold"))).is_none());
        assert_eq!(book.weight(None), 1.0);
    }

    #[test]
    fn a_file_defines_classes_a_default_and_tenant_weights() {
        let book = ClassBook::parse(
            r#"
            default_class = "bulk"
            [[classes]]
            name = "chat"
            ttft_ms = 1000
            itl_ms = 40
            priority = 2
            [[classes]]
            name = "bulk"
            ttft_ms = 30000
            itl_ms = 200
            [tenants]
            default_weight = 2
            weights = { team-a = 3 }
            "#,
        )
        .unwrap();
        assert_eq!(book.class(None).unwrap().name.as_str(), "bulk");
        assert_eq!(book.classes().map(|c| c.name.as_str()).collect::<Vec<_>>(), ["bulk", "chat"]);
        assert_eq!(book.weight(Some(&TenantId::new("team-a"))), 3.0);
        assert_eq!(book.weight(Some(&TenantId::new("team-z"))), 2.0);
        assert!(book.names_tenant(&TenantId::new("team-a")));
    }

    #[test]
    fn each_bad_file_is_refused_with_its_reason() {
        let cases = [
            ("classes = [", "TOML"),
            ("colour = 1", "unknown field"),
            ("default_class = \"x\"", "not among"),
            ("[[classes]]\nname = \"a b\"\nttft_ms = 1\nitl_ms = 1", "class name"),
            ("[[classes]]\nname = \"a\"\nttft_ms = 0\nitl_ms = 1", "positive"),
            (
                "[[classes]]\nname = \"a\"\nttft_ms = 1\nitl_ms = 1\n[[classes]]\nname = \"a\"\nttft_ms = 1\nitl_ms = 1",
                "twice",
            ),
            ("[tenants]\nweights = { a = 0 }", "not positive"),
            ("[tenants]\ndefault_weight = -1", "not positive"),
        ];
        for (text, why) in cases {
            let e = ClassBook::parse(text).unwrap_err();
            assert!(e.contains(why) || why == "TOML", "{text:?}: {e}");
        }
    }
}

//! JSON paths (`$.loads[0].token_usage`) and the patterns that name sets of them
//! (`$.loads[*].token_usage`, `$.internal_states[*].**`).

use std::fmt;

/// One step from a JSON value to a child.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Step {
    /// An object's member.
    Key(String),
    /// An array's element.
    Index(usize),
}

/// Where a value sits, from the root (`$`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct JsonPath(pub Vec<Step>);

impl JsonPath {
    /// The root.
    pub fn root() -> Self {
        Self(Vec::new())
    }

    /// This path's member `key`.
    pub fn key(&self, key: &str) -> Self {
        let mut steps = self.0.clone();
        steps.push(Step::Key(key.to_owned()));
        Self(steps)
    }

    /// This path's element `index`.
    pub fn index(&self, index: usize) -> Self {
        let mut steps = self.0.clone();
        steps.push(Step::Index(index));
        Self(steps)
    }
}

impl fmt::Display for JsonPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("$")?;
        for step in &self.0 {
            match step {
                Step::Key(k) => write!(f, ".{k}")?,
                Step::Index(i) => write!(f, "[{i}]")?,
            }
        }
        Ok(())
    }
}

/// One step of a [`PathPattern`].
#[derive(Debug, Clone, PartialEq, Eq)]
enum PatternStep {
    /// This member.
    Key(String),
    /// This element.
    Index(usize),
    /// `.*`: any one member or element.
    Any,
    /// `[*]`: any one element.
    AnyIndex,
    /// `.**`: any number of steps, none included.
    AnyDepth,
}

/// A set of paths: `$` then `.key`, `[3]`, `.*` (one step of any kind), `[*]` (any element) and
/// `.**` (any number of steps), e.g. `$.loads[*].decode_moments` or `$.internal_states.**`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathPattern {
    text: String,
    steps: Vec<PatternStep>,
}

/// A pattern that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad JSON path pattern {pattern:?}: {why}")]
pub struct PatternError {
    /// The pattern as written.
    pub pattern: String,
    /// What is wrong with it.
    pub why: &'static str,
}

impl PathPattern {
    /// Parses `text`.
    ///
    /// # Errors
    /// When `text` does not start with `$` or holds an empty or unclosed step.
    pub fn parse(text: &str) -> Result<Self, PatternError> {
        let err = |why| PatternError { pattern: text.to_owned(), why };
        let mut rest = text.strip_prefix('$').ok_or_else(|| err("it must start with `$`"))?;
        let mut steps = Vec::new();
        while !rest.is_empty() {
            if let Some(after) = rest.strip_prefix('[') {
                let (inner, tail) = after.split_once(']').ok_or_else(|| err("an unclosed `[`"))?;
                steps.push(match inner {
                    "*" => PatternStep::AnyIndex,
                    n => PatternStep::Index(n.parse().map_err(|_| err("an index that is not a number"))?),
                });
                rest = tail;
            } else if let Some(after) = rest.strip_prefix('.') {
                let end = after.find(['.', '[']).unwrap_or(after.len());
                let (name, tail) = after.split_at(end);
                steps.push(match name {
                    "" => return Err(err("an empty key")),
                    "*" => PatternStep::Any,
                    "**" => PatternStep::AnyDepth,
                    k => PatternStep::Key(k.to_owned()),
                });
                rest = tail;
            } else {
                return Err(err("a step must start with `.` or `[`"));
            }
        }
        Ok(Self { text: text.to_owned(), steps })
    }

    /// Whether `path` is in the set.
    pub fn matches(&self, path: &JsonPath) -> bool {
        matches_from(&self.steps, &path.0)
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

fn matches_from(pattern: &[PatternStep], path: &[Step]) -> bool {
    let Some((first, rest)) = pattern.split_first() else { return path.is_empty() };
    if *first == PatternStep::AnyDepth {
        return (0..=path.len()).any(|skip| matches_from(rest, &path[skip..]));
    }
    let Some((step, path_rest)) = path.split_first() else { return false };
    let here = match (first, step) {
        (PatternStep::Key(k), Step::Key(s)) => k == s,
        (PatternStep::Index(i), Step::Index(j)) => i == j,
        (PatternStep::Any, _) | (PatternStep::AnyIndex, Step::Index(_)) => true,
        _ => false,
    };
    here && matches_from(rest, path_rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(steps: &[Step]) -> JsonPath {
        JsonPath(steps.to_vec())
    }

    #[test]
    fn paths_print_as_written() {
        let p = JsonPath::root().key("loads").index(0).key("token_usage");
        assert_eq!(p.to_string(), "$.loads[0].token_usage");
        assert_eq!(JsonPath::root().to_string(), "$");
    }

    #[test]
    fn patterns_match_steps_wildcards_and_depths() {
        let usage = JsonPath::root().key("loads").index(3).key("token_usage");
        assert!(PathPattern::parse("$.loads[*].token_usage").unwrap().matches(&usage));
        assert!(PathPattern::parse("$.loads[3].token_usage").unwrap().matches(&usage));
        assert!(!PathPattern::parse("$.loads[2].token_usage").unwrap().matches(&usage));
        assert!(PathPattern::parse("$.*.*.token_usage").unwrap().matches(&usage));
        assert!(PathPattern::parse("$.**").unwrap().matches(&usage));
        assert!(PathPattern::parse("$.**.token_usage").unwrap().matches(&usage));
        assert!(PathPattern::parse("$.loads.**").unwrap().matches(&path(&[Step::Key("loads".into())])));
        assert!(!PathPattern::parse("$.loads.*.token_usage").unwrap().matches(&JsonPath::root()));
        assert!(!PathPattern::parse("$[*]").unwrap().matches(&JsonPath::root().key("x")));
        assert!(PathPattern::parse("$").unwrap().matches(&JsonPath::root()));
    }

    #[test]
    fn bad_patterns_say_why() {
        for bad in ["loads", "$.", "$[x]", "$[1", "$loads"] {
            assert!(PathPattern::parse(bad).is_err(), "{bad}");
        }
    }
}

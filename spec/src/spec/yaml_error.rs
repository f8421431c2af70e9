//! Parse errors: a serde_yaml error through serde_path_to_error becomes a
//! `SpecError` with the field path, the line and what is allowed. Every
//! config file (system spec, ccl.yaml, sweep plans) parses through here.

use super::error::SpecError;
use super::locate::line_of;

/// Turns a serde error into a `SpecError` with the field path, line and a fix.
/// Parses YAML into `T`; errors name the file, the field path and the line.
/// Every config file (system spec, ccl.yaml, sweep plans) parses through here.
pub fn parse_yaml<T: serde::de::DeserializeOwned>(
    text: &str,
    origin: &str,
) -> Result<T, SpecError> {
    let text = super::input::prepare_yaml(text, origin)?;
    let de = serde_yaml::Deserializer::from_str(&text);
    serde_path_to_error::deserialize(de).map_err(|e| parse_error(&e, &text, origin))
}

fn parse_error(
    e: &serde_path_to_error::Error<serde_yaml::Error>,
    text: &str,
    origin: &str,
) -> SpecError {
    let parent = known_path(e.path());
    let message = bare_message(e.inner(), &parent);
    let mut line = flow_start_line(&message).or(e.inner().location().map(|l| l.line()));
    if message.starts_with("missing field `") {
        // Point at the mapping that lacks the field; a missing top-level key has no line.
        line = if parent.is_empty() {
            None
        } else {
            line_of(text, &parent).or(line)
        };
    }
    let (path, problem, allowed) = explain(parent, &message);
    SpecError {
        file: origin.into(),
        path: if path.is_empty() {
            "(document)".into()
        } else {
            path
        },
        line,
        problem,
        allowed,
    }
}

/// (path, problem, allowed) for a serde message: reuses serde's "expected ..." as the fix.
fn explain(path: String, message: &str) -> (String, String, String) {
    if let Some(field) = backticked(message, "missing field `") {
        let place = if path.is_empty() {
            "at the top level".to_string()
        } else {
            format!("under `{path}`")
        };
        let allowed = format!("add `{field}:` {place} (configs/topology.yaml lists every field)");
        return (join(&path, field), message.to_string(), allowed);
    }
    if message.starts_with("duplicate field `") {
        let allowed = "each field at most once; delete the repeated key";
        return (path, message.to_string(), allowed.to_string());
    }
    if let Some((head, expected)) = message.split_once(", expected ") {
        let allowed = if let Some(v) = quoted_number(head) {
            format!(
                "write {v} without quotes or tags: {}",
                humanize_expected(expected)
            )
        } else if head.starts_with("unknown field") {
            format!(
                "field names here: {}",
                expected.trim_start_matches("one of ")
            )
        } else {
            humanize_expected(expected)
        };
        return (path, head.to_string(), allowed);
    }
    let allowed = "well-formed YAML: indent nested keys consistently with spaces (no tabs), \
                   close every { and [, one `key: value` per entry";
    (path, message.to_string(), allowed.to_string())
}

/// The value of serde's `invalid type: string "4"` when it spells a number
/// or a boolean: quoted (or tagged `!!str`) where the field takes the value.
fn quoted_number(head: &str) -> Option<&str> {
    let v = head
        .strip_prefix("invalid type: string \"")?
        .strip_suffix('"')?;
    (v.parse::<f64>().is_ok() || v == "true" || v == "false").then_some(v)
}

/// The error path as `a.b[2].c`, cut at the first segment serde could not name.
fn known_path(path: &serde_path_to_error::Path) -> String {
    use serde_path_to_error::Segment;
    let mut out = String::new();
    for segment in path {
        match segment {
            Segment::Seq { index } => out.push_str(&format!("[{index}]")),
            Segment::Map { key } => out = join(&out, key),
            Segment::Enum { variant } => out = join(&out, variant),
            Segment::Unknown => break,
        }
    }
    out
}

fn join(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_string()
    } else {
        format!("{parent}.{key}")
    }
}

/// serde_yaml's message without its own `path: ` prefix and ` at line L column C`
/// suffix: `SpecError` shows both in its own format.
fn bare_message(e: &serde_yaml::Error, path: &str) -> String {
    let mut msg = e.to_string();
    if let Some(loc) = e.location() {
        let suffix = format!(" at line {} column {}", loc.line(), loc.column());
        if let Some(stripped) = msg.strip_suffix(&suffix) {
            msg = stripped.to_string();
        }
    }
    if let Some((head, rest)) = msg.split_once(": ") {
        let prefixes_path = head == path
            || path.starts_with(&format!("{head}."))
            || path.starts_with(&format!("{head}["));
        if prefixes_path {
            return rest.to_string();
        }
    }
    msg
}

/// For an unclosed `{`/`[`, libyaml reports the end of input; the line where the
/// flow collection opened ("while parsing a flow mapping at line N") is more useful.
fn flow_start_line(message: &str) -> Option<usize> {
    let after = &message[message.find("while parsing a flow")?..];
    let digits = &after[after.find("at line ")? + "at line ".len()..];
    let end = digits
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(digits.len());
    digits[..end].parse().ok()
}

/// The name between `prefix` and the next backtick, e.g. the field of "missing field `x`".
fn backticked<'a>(message: &'a str, prefix: &str) -> Option<&'a str> {
    let rest = message.strip_prefix(prefix)?;
    Some(&rest[..rest.find('`')?])
}

/// serde's "expected ..." phrase in words a spec author understands.
fn humanize_expected(expected: &str) -> String {
    match expected {
        // The field's own range is checked after parsing; here the value is
        // not a number of the right kind at all.
        "u32" | "u64" => {
            "a whole number in digits (no sign, fraction or unit suffix such as K)".into()
        }
        "f64" => "a number such as 1.0".into(),
        "a boolean" => "true or false".into(),
        "a sequence" => "a list such as [0, 5]".into(),
        "a map" => "a mapping of names to entries such as { key: value }".into(),
        s if s.starts_with("struct ") => "a mapping of fields such as { key: value }".into(),
        s => s.into(),
    }
}

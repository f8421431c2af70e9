//! Reading config files safely: every YAML the program reads (system specs,
//! ccl.yaml, sweep plans) comes through [`read_config`] and [`check_yaml`],
//! so no input can hang the reader, exhaust memory or slip a duplicate key.

use super::SpecError;
use std::borrow::Cow;
use std::io::Read;
use std::path::Path;

/// Largest config file read (16 MiB): far above any real spec or plan.
pub const MAX_CONFIG_BYTES: u64 = 16 << 20;

/// Deepest nesting of YAML mappings and lists accepted (a spec uses 4).
pub const MAX_YAML_DEPTH: usize = 64;

fn refuse(path: &Path, problem: String, allowed: &str) -> SpecError {
    SpecError {
        file: path.display().to_string(),
        path: "(file)".into(),
        line: None,
        problem,
        allowed: allowed.into(),
    }
}

/// Reads a config file: a regular file of at most [`MAX_CONFIG_BYTES`] of
/// UTF-8. `what` names the kind of file for the message ("system spec").
/// Devices, directories and FIFOs are refused before anything is read, and
/// at most the limit plus one byte is ever read, so `/dev/zero` or a growing
/// file cannot hang it.
pub fn read_config(path: &Path, what: &str) -> Result<String, SpecError> {
    let allowed = format!("a readable YAML {what} file of at most {MAX_CONFIG_BYTES} bytes");
    let meta = std::fs::metadata(path)
        .map_err(|e| refuse(path, format!("cannot read the {what}: {e}"), &allowed))?;
    if !meta.is_file() {
        let kind = if meta.is_dir() {
            "a directory"
        } else {
            "not a regular file (a device, FIFO or socket)"
        };
        return Err(refuse(path, format!("the {what} path is {kind}"), &allowed));
    }
    let file = std::fs::File::open(path)
        .map_err(|e| refuse(path, format!("cannot read the {what}: {e}"), &allowed))?;
    let mut bytes = Vec::new();
    file.take(MAX_CONFIG_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| refuse(path, format!("cannot read the {what}: {e}"), &allowed))?;
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        return Err(refuse(
            path,
            format!("the {what} is larger than {MAX_CONFIG_BYTES} bytes"),
            &allowed,
        ));
    }
    let text = String::from_utf8(bytes).map_err(|e| {
        refuse(
            path,
            format!(
                "the {what} is not UTF-8 text (invalid byte at offset {})",
                e.utf8_error().valid_up_to()
            ),
            &allowed,
        )
    })?;
    // Editors on some systems start UTF-8 files with a byte-order mark,
    // which YAML would read as part of the first key.
    Ok(match text.strip_prefix('\u{feff}') {
        Some(rest) => rest.to_string(),
        None => text,
    })
}

/// The core-schema tags a config may carry; every other tag is refused.
pub const CORE_TAGS: [&str; 7] = [
    "!!str", "!!int", "!!float", "!!bool", "!!null", "!!seq", "!!map",
];

/// YAML text made ready to deserialise, the one way every config (system
/// spec, ccl.yaml, sweep plan) is read: a leading byte-order mark dropped,
/// core tags resolved by [`resolve_core_tags`] (`!!str 4` reads as `"4"`,
/// `!!int "4"` as `4`; any other tag is refused naming it and its line),
/// then [`check_yaml`]. Both passes before YAML parsing are linear in the
/// text.
pub fn prepare_yaml<'a>(text: &'a str, origin: &str) -> Result<Cow<'a, str>, SpecError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let resolved = resolve_core_tags(text).map_err(|(line, tag)| SpecError {
        file: origin.into(),
        path: "(document)".into(),
        line: Some(line),
        problem: format!("YAML tag '{tag}'"),
        allowed: format!(
            "plain values without tags, or a core-schema tag ({}); delete '{tag}'",
            CORE_TAGS.join(", ")
        ),
    })?;
    check_yaml(&resolved, origin)?;
    Ok(resolved)
}

/// Checks YAML text before it is deserialised: nesting no deeper than
/// [`MAX_YAML_DEPTH`] (a quick scan, so a 10,000-level document is refused at
/// once) and no key twice in one mapping (serde would keep the last silently).
pub fn check_yaml(text: &str, origin: &str) -> Result<(), SpecError> {
    let err = |line: Option<usize>, problem: String, allowed: &str| {
        // serde_yaml says `a.b: duplicate entry with key "c"` (no `a.b: ` for
        // the top level): the path of the repeated key is a.b.c.
        let (parent, problem) = match problem.split_once(": duplicate") {
            Some((path, rest)) => (path.to_string(), format!("duplicate{rest}")),
            None => (String::new(), problem),
        };
        let key = problem
            .split_once("with key ")
            .map(|(_, k)| k.trim_matches('"').to_string());
        let path = match (parent.is_empty(), key) {
            (_, None) => "(document)".to_string(),
            (true, Some(k)) => k,
            (false, Some(k)) => format!("{parent}.{k}"),
        };
        SpecError {
            file: origin.into(),
            path,
            line,
            problem,
            allowed: allowed.into(),
        }
    };
    if let Some((line, depth)) = too_deep(text) {
        return Err(err(
            Some(line),
            format!("YAML nested {depth} levels deep"),
            &format!("at most {MAX_YAML_DEPTH} levels of nested mappings and lists"),
        ));
    }
    if let Err(e) = serde_yaml::from_str::<serde_yaml::Value>(text) {
        let message = e.to_string();
        if message.contains("duplicate entry") {
            let problem = match message.find(" at line ") {
                Some(i) => message[..i].to_string(),
                None => message.clone(),
            };
            // serde_yaml gives the mapping's first line; point at the repeat.
            let line = e.location().map(|l| {
                let key = problem
                    .split_once("with key ")
                    .map_or("", |(_, k)| k.trim_matches('"'));
                repeated_key_line(text, l.line(), key).unwrap_or(l.line())
            });
            return Err(err(
                line,
                problem,
                "each key at most once per mapping; delete or rename the repeated key",
            ));
        }
    }
    Ok(())
}

/// The line of the second `key:` of the mapping whose first key is on
/// `first` (1-based): in a flow mapping on that line itself, else the next
/// line at the same indentation before the mapping ends.
fn repeated_key_line(text: &str, first: usize, key: &str) -> Option<usize> {
    let lines: Vec<&str> = text.lines().collect();
    let start = lines.get(first.checked_sub(1)?)?;
    let is_key = |body: &str| {
        body.strip_prefix(key)
            .is_some_and(|rest| rest.trim_start().starts_with(':'))
    };
    let flow_keys = start
        .split(['{', ',', '}'])
        .filter(|part| is_key(part.trim_start()))
        .count();
    if flow_keys > 1 {
        return Some(first);
    }
    let indent = start.len() - start.trim_start().len();
    let mut seen = 0;
    for (n, line) in lines.iter().enumerate().skip(first - 1) {
        let body = line.trim_start();
        if body.is_empty() || body.starts_with('#') {
            continue;
        }
        let here = line.len() - body.len();
        if here < indent {
            break;
        }
        if here == indent && is_key(body) {
            seen += 1;
            if seen == 2 {
                return Some(n + 1);
            }
        }
    }
    None
}

/// (line, depth) of the first place nested deeper than the limit: block
/// indentation levels (each `- ` or `? ` marker opening one, so `- - - x`
/// is three) plus open flow brackets, checked at every bracket; one pass.
fn too_deep(text: &str) -> Option<(usize, usize)> {
    let mut indents: Vec<usize> = Vec::new();
    let mut flow = 0usize;
    for (n, line) in text.lines().enumerate() {
        let mut body = line;
        if flow == 0 {
            // Each block marker, and the content after the last, opens a
            // level at its column.
            loop {
                let rest = body.trim_start_matches(' ');
                if rest.is_empty() || rest.starts_with('#') {
                    break;
                }
                let column = line.len() - rest.len();
                while indents.last().is_some_and(|&i| i >= column) {
                    indents.pop();
                }
                indents.push(column);
                if indents.len() > MAX_YAML_DEPTH {
                    return Some((n + 1, indents.len()));
                }
                match rest.strip_prefix("- ").or_else(|| rest.strip_prefix("? ")) {
                    Some(after) => body = after,
                    None => {
                        body = rest;
                        break;
                    }
                }
            }
        }
        for c in body.chars() {
            match c {
                '[' | '{' => {
                    flow += 1;
                    if indents.len() + flow > MAX_YAML_DEPTH {
                        return Some((n + 1, indents.len() + flow));
                    }
                }
                ']' | '}' => flow = flow.saturating_sub(1),
                '#' => break,
                _ => {}
            }
        }
    }
    None
}

/// `text` with its core tags resolved in place (lines keep their numbers):
/// `!!str` quotes the plain scalar after it, `!!int`, `!!float`, `!!bool`
/// and `!!null` unquote a quoted one (the tag names the type, the spelling
/// then says it), `!!seq` and `!!map` go. Err is (line, tag) of the first
/// other tag. A tag is a `!` word where a value starts: at the start of a
/// line or after `: `, `- `, `? `, `[`, `{` or `,`, outside quotes and
/// comments.
pub fn resolve_core_tags(text: &str) -> Result<Cow<'_, str>, (usize, String)> {
    if !text.contains('!') {
        return Ok(Cow::Borrowed(text));
    }
    let mut out = String::with_capacity(text.len());
    let mut flow = 0usize;
    for (n, line) in text.split_inclusive('\n').enumerate() {
        out.push_str(&resolve_line(line, &mut flow).map_err(|tag| (n + 1, tag))?);
    }
    Ok(Cow::Owned(out))
}

/// One line of [`resolve_core_tags`]; `flow` carries the open brackets.
fn resolve_line(line: &str, flow: &mut usize) -> Result<String, String> {
    let mut out = String::with_capacity(line.len());
    let mut quote: Option<char> = None;
    let mut prev = ' ';
    let mut rest = line;
    while let Some(c) = rest.chars().next() {
        let value_starts = prev == ' ' || matches!(prev, '[' | '{' | ',');
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, '#') if prev == ' ' => {
                out.push_str(rest);
                return Ok(out);
            }
            (None, '[' | '{') => *flow += 1,
            (None, ']' | '}') => *flow = flow.saturating_sub(1),
            (None, '!') if value_starts && tag_position(&out) => {
                let end = rest
                    .find(|c: char| c.is_whitespace() || ",[]{}".contains(c))
                    .unwrap_or(rest.len());
                let (tag, after) = rest.split_at(end);
                let (resolved, left) = resolve_tag(tag, after.trim_start_matches(' '), *flow > 0)?;
                out.push_str(&resolved);
                rest = left;
                prev = out.chars().last().unwrap_or(' ');
                continue;
            }
            _ => {}
        }
        out.push(c);
        prev = c;
        rest = &rest[c.len_utf8()..];
    }
    Ok(out)
}

/// Whether a value may start after `before` (the line so far): at its
/// start, or after `: `, `- `, `? `, `[`, `{` or `,`.
fn tag_position(before: &str) -> bool {
    let t = before.trim_end_matches(' ');
    t.is_empty()
        || t.ends_with(['[', '{', ','])
        || (before.len() > t.len()
            && (t.ends_with(':') || t == "-" || t.ends_with(" -") || t == "?"))
        || t.trim_start_matches([' ', '-']).is_empty()
}

/// The text a core `tag` with its scalar `after` stands for, and what is
/// left of the line; Err names a tag outside the core schema.
fn resolve_tag<'a>(tag: &str, after: &'a str, in_flow: bool) -> Result<(String, &'a str), String> {
    if !CORE_TAGS.contains(&tag) {
        return Err(tag.to_string());
    }
    let quoted = after.starts_with(['\'', '"']);
    // A plain scalar ends at a comment, the line's end or, in flow, a bracket or comma.
    let plain_end = |s: &str| {
        let mut end = s.find(" #").unwrap_or(s.len());
        if in_flow {
            end = end.min(s.find([',', ']', '}']).unwrap_or(s.len()));
        }
        s[..end].trim_end_matches([' ', '\r', '\n']).len()
    };
    match tag {
        "!!str" if !quoted && !after.starts_with(['[', '{']) => {
            let end = plain_end(after);
            let scalar = &after[..end];
            Ok((format!("'{}'", scalar.replace('\'', "''")), &after[end..]))
        }
        "!!int" | "!!float" | "!!bool" | "!!null" if quoted => {
            let q = &after[..1];
            match after[1..].find(q) {
                Some(close) => Ok((after[1..1 + close].to_string(), &after[close + 2..])),
                None => Ok((String::new(), after)),
            }
        }
        _ => Ok((String::new(), after)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nesting_is_measured_by_indentation_and_brackets() {
        assert_eq!(too_deep("a:\n  b:\n    c: [1, {d: 2}]\n"), None);
        let deep = "a: ".to_string() + &"[".repeat(100);
        assert_eq!(too_deep(&deep), Some((1, 65)));
        // Closed on the same line, or block lists opened by markers alone.
        let closed = format!("a: {}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert_eq!(too_deep(&closed), Some((1, 65)));
        let dashes = format!("a:\n{}x\n", "- ".repeat(30_000));
        assert_eq!(too_deep(&dashes), Some((2, 65)));
        assert_eq!(too_deep("a:\n  - - [1, 2]\n  - b: {c: [3]}\n"), None);
        let mut block = String::new();
        for i in 0..100 {
            block.push_str(&format!("{}k{i}:\n", " ".repeat(i)));
        }
        assert_eq!(
            too_deep(&block),
            Some((MAX_YAML_DEPTH + 1, MAX_YAML_DEPTH + 1))
        );
    }

    #[test]
    fn core_tags_resolve_to_their_spelling_and_others_are_refused() {
        let r = |t: &str| resolve_core_tags(t).map(|c| c.into_owned());
        assert_eq!(r("a: !!str 4\n").unwrap(), "a: '4'\n");
        assert_eq!(r("a: !!str it's  # c\n").unwrap(), "a: 'it''s'  # c\n");
        assert_eq!(r("a: [!!str 4, !!int \"5\"]\n").unwrap(), "a: ['4', 5]\n");
        assert_eq!(
            r("a: !!int '4'\nb: !!map {c: 1}\n").unwrap(),
            "a: 4\nb: {c: 1}\n"
        );
        assert_eq!(r("- !!seq [1]\n").unwrap(), "- [1]\n");
        // Not tags: inside quotes, comments or a plain scalar.
        for plain in ["a: 'x !y'\n", "a: 1 # !z\n", "a: wow!\n", "a: b !c\n"] {
            assert_eq!(r(plain).unwrap(), plain);
        }
        assert_eq!(r("a: 1\nb: !big 4\n").unwrap_err(), (2, "!big".to_string()));
        assert_eq!(
            r("- !!binary x\n").unwrap_err(),
            (1, "!!binary".to_string())
        );
        let e = prepare_yaml("x: 1\ny: !<tag:x> 2\n", "t.yaml").unwrap_err();
        assert_eq!(
            (e.line, e.problem.as_str()),
            (Some(2), "YAML tag '!<tag:x>'")
        );
        assert!(e.allowed.contains("delete '!<tag:x>'"), "{e}");
    }

    #[test]
    fn a_byte_order_mark_is_dropped() {
        assert_eq!(prepare_yaml("\u{feff}name: x\n", "t").unwrap(), "name: x\n");
    }

    #[test]
    fn a_duplicate_key_names_the_key_and_line() {
        let e = check_yaml("a: 1\nb:\n  c: 1\n  c: 2\n", "t.yaml").unwrap_err();
        assert_eq!((e.path.as_str(), e.line), ("b.c", Some(4)));
        let top = check_yaml("a: 1\na: 2\n", "t.yaml").unwrap_err();
        assert_eq!((top.path.as_str(), top.line), ("a", Some(2)), "{top}");
        let flow = check_yaml("x: 1\nm: { w: 4, h: 4, w: 2 }\n", "t").unwrap_err();
        assert_eq!((flow.path.as_str(), flow.line), ("m.w", Some(2)), "{flow}");
        assert_eq!(e.problem, "duplicate entry with key \"c\"");
        assert!(e.allowed.contains("each key at most once"), "{e}");
        assert!(check_yaml("a: 1\nb: {c: 1, d: 2}\n", "t").is_ok());
    }
}

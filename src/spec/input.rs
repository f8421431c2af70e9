//! Reading config files safely: every YAML the program reads (system specs,
//! ccl.yaml, sweep plans) comes through [`read_config`] and [`check_yaml`],
//! so no input can hang the reader, exhaust memory or slip a duplicate key.

use super::SpecError;
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
    String::from_utf8(bytes).map_err(|e| {
        refuse(
            path,
            format!(
                "the {what} is not UTF-8 text (invalid byte at offset {})",
                e.utf8_error().valid_up_to()
            ),
            &allowed,
        )
    })
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
/// indentation levels plus open flow brackets.
fn too_deep(text: &str) -> Option<(usize, usize)> {
    let mut indents: Vec<usize> = Vec::new();
    let mut flow = 0usize;
    for (n, line) in text.lines().enumerate() {
        let body = line.trim_start_matches([' ', '-']);
        if flow == 0 && !body.is_empty() && !body.starts_with('#') {
            let indent = line.len() - body.len();
            while indents.last().is_some_and(|&i| i >= indent) {
                indents.pop();
            }
            indents.push(indent);
        }
        for c in body.chars() {
            match c {
                '[' | '{' => flow += 1,
                ']' | '}' => flow = flow.saturating_sub(1),
                '#' => break,
                _ => {}
            }
        }
        let depth = indents.len() + flow;
        if depth > MAX_YAML_DEPTH {
            return Some((n + 1, depth));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nesting_is_measured_by_indentation_and_brackets() {
        assert_eq!(too_deep("a:\n  b:\n    c: [1, {d: 2}]\n"), None);
        let deep = "a: ".to_string() + &"[".repeat(100);
        assert_eq!(too_deep(&deep), Some((1, 101)));
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

//! Where a dotted field path (`links.noc.latency_ns`, `a.b[2]`) sits in a
//! YAML text, found by indentation: validation errors name the line.

/// 1-based line of the key at a dotted `path` (`links.noc.latency_ns`,
/// `system.sips.inter_sip_cubes[2]`) in `text`, found by indentation.
///
/// serde only reports lines for parse errors; validation errors need this to
/// point the user at the offending key. A key inside a one-line flow mapping
/// (`cube_mesh: { w: 4, h: 4 }`) gives the line of that mapping; a list index
/// gives the line of that `- ` item, or of the key for a flow list.
pub fn line_of(text: &str, path: &str) -> Option<usize> {
    let (keys, index) = split_path(path);
    if keys.is_empty() {
        return None;
    }
    let lines: Vec<&str> = text.lines().collect();
    let mut stack: Vec<(usize, &str)> = Vec::new();
    for (n, raw) in lines.iter().enumerate() {
        let Some((indent, key, value)) = key_line(raw) else {
            continue;
        };
        while stack.last().is_some_and(|&(i, _)| i >= indent) {
            stack.pop();
        }
        stack.push((indent, key));
        let here: Vec<&str> = stack.iter().map(|&(_, k)| k).collect();
        if here == keys {
            let item = index.and_then(|i| block_item_line(&lines[n + 1..], indent, i));
            return Some(item.map_or(n + 1, |k| n + 2 + k));
        }
        if keys.starts_with(&here) && flow_contains(value, &keys[here.len()..]) {
            return Some(n + 1);
        }
    }
    None
}

/// `a.b[2]` -> (["a", "b"], Some(2)); only the last index matters for lines.
fn split_path(path: &str) -> (Vec<&str>, Option<usize>) {
    let mut index = None;
    let keys = path
        .split('.')
        .filter(|s| !s.is_empty())
        .map(|seg| match seg.split_once('[') {
            Some((key, rest)) => {
                index = rest.trim_end_matches(']').parse().ok();
                key
            }
            None => {
                index = None;
                seg
            }
        })
        .collect();
    (keys, index)
}

/// (indent, key, value) of a `key: value` line; None for blanks, comments, list items.
fn key_line(raw: &str) -> Option<(usize, &str, &str)> {
    let body = raw.trim_start_matches(' ');
    let indent = raw.len() - body.len();
    if body.is_empty() || body.starts_with('#') || body.starts_with('-') {
        return None;
    }
    let colon = key_colon(body)?;
    let key = body[..colon].trim().trim_matches(|c| c == '"' || c == '\'');
    Some((indent, key, body[colon + 1..].trim_start()))
}

/// Byte index of the `:` that ends a YAML key (followed by a space or the line end).
fn key_colon(s: &str) -> Option<usize> {
    s.char_indices()
        .find(|&(i, c)| c == ':' && matches!(s.as_bytes().get(i + 1), None | Some(b' ' | b'\t')))
        .map(|(i, _)| i)
}

/// Line offset (0-based, within `rest`) of the `index`-th `- ` item of a block list.
fn block_item_line(rest: &[&str], key_indent: usize, index: usize) -> Option<usize> {
    let mut seen = 0;
    for (k, raw) in rest.iter().enumerate() {
        let body = raw.trim_start_matches(' ');
        if body.is_empty() || body.starts_with('#') {
            continue;
        }
        let indent = raw.len() - body.len();
        let is_item = body == "-" || body.starts_with("- ");
        if !is_item || indent < key_indent {
            return None;
        }
        if seen == index {
            return Some(k);
        }
        seen += 1;
    }
    None
}

/// Whether the flow mapping `value` (`{ a: 1, b: { c: 2 } }`) holds the key chain `keys`.
fn flow_contains(value: &str, keys: &[&str]) -> bool {
    let Some((first, rest)) = keys.split_first() else {
        return false;
    };
    if !value.starts_with('{') {
        return false;
    }
    flow_entries(value)
        .into_iter()
        .any(|(k, v)| k == *first && (rest.is_empty() || flow_contains(v, rest)))
}

/// Top-level `key: value` entries of a flow mapping starting at `{`; tolerates a missing `}`.
fn flow_entries(flow: &str) -> Vec<(&str, &str)> {
    let mut entries = Vec::new();
    let mut depth = 0usize;
    let mut quote: Option<char> = None;
    let mut start = 1;
    for (i, c) in flow.char_indices() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(c),
            (None, '{' | '[') => depth += 1,
            (None, '}' | ']') => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    entries.extend(flow_entry(&flow[start..i]));
                    return entries;
                }
            }
            (None, ',') if depth == 1 => {
                entries.extend(flow_entry(&flow[start..i]));
                start = i + 1;
            }
            _ => {}
        }
    }
    entries.extend(flow_entry(&flow[start.min(flow.len())..]));
    entries
}

/// `key: value` of one flow-mapping entry.
fn flow_entry(seg: &str) -> Option<(&str, &str)> {
    let colon = key_colon(seg)?;
    let key = seg[..colon].trim().trim_matches(|c| c == '"' || c == '\'');
    Some((key, seg[colon + 1..].trim()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::DEFAULT_SYSTEM_YAML;

    #[test]
    fn spec_line_of_block_and_flow_keys() {
        let t = DEFAULT_SYSTEM_YAML;
        assert_eq!(line_of(t, "system"), Some(3));
        assert_eq!(line_of(t, "system.sips.count"), Some(5));
        assert_eq!(line_of(t, "system.tick_ns"), Some(10));
        assert_eq!(line_of(t, "sip.cube_mesh"), Some(12));
        assert_eq!(line_of(t, "sip.cube_mesh.h"), Some(12));
        assert_eq!(line_of(t, "cube.pe_layout.corners"), Some(14));
        assert_eq!(line_of(t, "memory.hbm.latency_ns"), Some(19));
        assert_eq!(line_of(t, "links.pcie.packet_bytes"), Some(24));
        assert_eq!(line_of(t, "pe.launch_overhead_ns"), Some(28));
        // commented-out keys, absent keys and keys absent from a flow map are not found
        assert_eq!(line_of(t, "system.sips.w"), None);
        assert_eq!(line_of(t, "sip.cube_mesh.d"), None);
        assert_eq!(line_of(t, "links.noc.ideal"), None);
        assert_eq!(line_of(t, ""), None);
    }

    #[test]
    fn spec_line_of_lists_and_nested_flow() {
        let t = "a:\n  b: [1, 2]\n  c:\n    - 1\n    # note\n    - 2\n  d: { e: { f: 1 }, g: \"x,y\", h: 2 }\n";
        assert_eq!(line_of(t, "a.b[1]"), Some(2));
        assert_eq!(line_of(t, "a.c[0]"), Some(4));
        assert_eq!(line_of(t, "a.c[1]"), Some(6));
        assert_eq!(line_of(t, "a.c[9]"), Some(3));
        assert_eq!(line_of(t, "a.d.e.f"), Some(7));
        assert_eq!(line_of(t, "a.d.h"), Some(7));
        assert_eq!(line_of(t, "a.d.e.z"), None);
        assert_eq!(line_of("x: { y: 1", "x.y"), Some(1));
    }
}

//! The one error type of spec loading: where the problem is and how to fix it.

/// A rejected system spec.
///
/// Rendered as `{file}:{line}: {path}: {problem}; allowed: {allowed}` so editors
/// and terminals can jump to the line, and the user always sees a fix.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{file}{loc}: {path}: {problem}; allowed: {allowed}", loc = line_suffix(.line))]
pub struct SpecError {
    /// The spec file path, or `<embedded default>` / the origin given to `from_yaml`.
    pub file: String,
    /// Dotted field path, e.g. `links.noc.bandwidth_gbps` or `system.sips.inter_sip_cubes[2]`.
    pub path: String,
    /// 1-based line in the file, when known.
    pub line: Option<usize>,
    /// What is wrong, with the offending value.
    pub problem: String,
    /// What would be accepted instead (the fix).
    pub allowed: String,
}

/// `:{line}` or nothing when the line is unknown.
fn line_suffix(line: &Option<usize>) -> String {
    line.map(|l| format!(":{l}")).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(line: Option<usize>) -> SpecError {
        SpecError {
            file: "a.yaml".into(),
            path: "links.noc.bandwidth_gbps".into(),
            line,
            problem: "bandwidth_gbps is 0".into(),
            allowed: "a finite number > 0".into(),
        }
    }

    #[test]
    fn spec_error_display_with_line() {
        assert_eq!(
            err(Some(21)).to_string(),
            "a.yaml:21: links.noc.bandwidth_gbps: bandwidth_gbps is 0; allowed: a finite number > 0"
        );
    }

    #[test]
    fn spec_error_display_without_line() {
        assert_eq!(
            err(None).to_string(),
            "a.yaml: links.noc.bandwidth_gbps: bandwidth_gbps is 0; allowed: a finite number > 0"
        );
    }
}

//! "Did you mean" suggestions for mistyped names (presets, plans, ccl
//! entries): the known names closest by edit distance.

/// `; did you mean 'x'?` for the known name nearest to `typed`, when one is
/// close enough to be a typo (at most a third of its letters differ);
/// empty otherwise.
pub fn did_you_mean<'a>(typed: &str, known: impl IntoIterator<Item = &'a str>) -> String {
    let typed_lower = typed.to_lowercase();
    let best = known
        .into_iter()
        .map(|k| (edit_distance(&typed_lower, &k.to_lowercase()), k))
        .min();
    match best {
        Some((d, k)) if d > 0 && d <= typed.chars().count().max(3) / 3 => {
            format!("; did you mean '{k}'?")
        }
        Some((0, k)) if k != typed => format!("; did you mean '{k}'?"),
        _ => String::new(),
    }
}

/// Levenshtein distance over characters (insert, delete, substitute).
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diag = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let next = (diag + usize::from(ca != cb))
                .min(row[j] + 1)
                .min(row[j + 1] + 1);
            diag = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distances_are_levenshtein() {
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "ring"), 4);
        assert_eq!(edit_distance("ring", "ring"), 0);
    }

    #[test]
    fn suggests_the_nearest_name_only_when_close() {
        let known = ["ring", "tree", "hier_lanes", "mesh_16", "torus_4096"];
        assert_eq!(
            did_you_mean("hier_lane", known),
            "; did you mean 'hier_lanes'?"
        );
        assert_eq!(did_you_mean("mesh16", known), "; did you mean 'mesh_16'?");
        assert_eq!(did_you_mean("Ring", known), "; did you mean 'ring'?");
        assert_eq!(did_you_mean("fastest", known), "");
    }
}

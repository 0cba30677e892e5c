//! Slurm's hostlist expressions (`n[1-4,7]`, `gpu[01-02]-ib`,
//! `rack[1-2]n[1-8]`), expanded into node names, with bounds: at most
//! [`MAX_EXPR`] characters and [`MAX_NAMES`] names.
//!
//! ```text
//! list  = item ("," item)*               commas inside brackets belong to the brackets
//! item  = (text | "[" range ("," range)* "]")+
//! range = number | number "-" number     a leading zero sets the width: [01-10] → 01 … 10
//! ```
//! The names of an item are the product of its bracket groups, left to
//! right, as Slurm expands them.

/// The longest expression accepted (characters).
pub const MAX_EXPR: usize = 1024;
/// The most names an expression may expand to.
pub const MAX_NAMES: usize = 4096;

/// The node names of `expr`, in order, or what is wrong with it.
pub fn expand(expr: &str) -> Result<Vec<String>, String> {
    if expr.len() > MAX_EXPR {
        return Err(format!("a hostlist of {} characters is too long (at most {MAX_EXPR})", expr.len()));
    }
    if let Some(c) = expr.chars().find(|c| !(c.is_ascii_alphanumeric() || "-_.[],".contains(*c))) {
        return Err(format!("`{c}` cannot be in a hostlist (node names, with ranges in brackets: n[1-4,7])"));
    }
    let mut out = Vec::new();
    for item in split_top(expr)? {
        if item.is_empty() {
            return Err("an empty name in the hostlist (two commas, or one at an end)".into());
        }
        let mut names = vec![String::new()];
        let mut rest = item;
        while !rest.is_empty() {
            if let Some(inner) = rest.strip_prefix('[') {
                let end = inner.find(']').ok_or_else(|| format!("`[` without `]` in `{item}`"))?;
                let numbers = ranges(&inner[..end], item)?;
                if names.len().saturating_mul(numbers.len()).saturating_add(out.len()) > MAX_NAMES {
                    return Err(format!("the hostlist names more than {MAX_NAMES} nodes"));
                }
                names = names.iter().flat_map(|n| numbers.iter().map(move |x| format!("{n}{x}"))).collect();
                rest = &inner[end + 1..];
            } else {
                let end = rest.find('[').unwrap_or(rest.len());
                if rest[..end].contains(']') {
                    return Err(format!("`]` without `[` in `{item}`"));
                }
                for n in &mut names {
                    n.push_str(&rest[..end]);
                }
                rest = &rest[end..];
            }
        }
        out.extend(names);
        if out.len() > MAX_NAMES {
            return Err(format!("the hostlist names more than {MAX_NAMES} nodes"));
        }
    }
    Ok(out)
}

/// The items of a list: split at commas outside brackets.
fn split_top(expr: &str) -> Result<Vec<&str>, String> {
    let (mut items, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, c) in expr.char_indices() {
        match c {
            '[' if depth == 0 => depth = 1,
            '[' => return Err("nested `[` in the hostlist".into()),
            ']' if depth == 1 => depth = 0,
            ',' if depth == 0 => {
                items.push(&expr[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err("`[` without `]` in the hostlist".into());
    }
    items.push(&expr[start..]);
    Ok(items)
}

/// The numbers of a bracket group, each as written (its width kept).
fn ranges(group: &str, item: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for r in group.split(',') {
        let (a, b) = r.split_once('-').unwrap_or((r, r));
        let bad = || format!("`[{group}]` in `{item}`: ranges are numbers, or two joined by `-` (1-4, 01-10)");
        if a.is_empty() || b.is_empty() || !a.bytes().chain(b.bytes()).all(|c| c.is_ascii_digit()) || a.len() > 9 || b.len() > 9 {
            return Err(bad());
        }
        let (x, y): (u64, u64) = (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
        if y < x {
            return Err(format!("`{r}` in `{item}` runs backwards"));
        }
        if (y - x) as usize >= MAX_NAMES || out.len() + (y - x) as usize >= MAX_NAMES {
            return Err(format!("the hostlist names more than {MAX_NAMES} nodes"));
        }
        let width = if a.starts_with('0') { a.len() } else { 0 };
        out.extend((x..=y).map(|n| format!("{n:0width$}")));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expands_as_slurm_does() {
        let ok = |e: &str| expand(e).unwrap();
        assert_eq!(ok("n1"), ["n1"]);
        assert_eq!(ok("n[1-3]"), ["n1", "n2", "n3"]);
        assert_eq!(ok("n[01-03,7],gpu9"), ["n01", "n02", "n03", "n7", "gpu9"], "each range its own width");
        assert_eq!(ok("rack[1-2]n[1-2]-ib"), ["rack1n1-ib", "rack1n2-ib", "rack2n1-ib", "rack2n2-ib"]);
        assert_eq!(ok("node.a_1"), ["node.a_1"]);
    }

    #[test]
    fn refuses_with_what_is_wrong() {
        for (e, want) in [
            ("n[1-", "without `]`"),
            ("n1]", "without `[`"),
            ("n[3-1]", "backwards"),
            ("n[a-b]", "ranges are numbers"),
            ("n[[1]]", "nested"),
            ("n1,,n2", "empty name"),
            ("n 1", "cannot be in a hostlist"),
            ("n[1-100000]", "more than 4096"),
            ("a[1-100]b[1-100]", "more than 4096"),
        ] {
            let err = expand(e).unwrap_err();
            assert!(err.contains(want), "{e}: {err}");
        }
        assert!(expand(&"n".repeat(MAX_EXPR + 1)).unwrap_err().contains("too long"));
    }
}

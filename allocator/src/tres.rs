//! Slurm's trackable-resource strings, as far as the rules need them: how
//! many GPUs a job asks for or holds. The one reading, shared by the
//! plugins (a job's request and its allocated TRES) and the history import
//! (sacct's `AllocTRES`).

/// GPUs in a TRES/GRES string: `gres:gpu:2`, `gres/gpu:fake:2`,
/// `gres/gpu=4` (allocated TRES), several entries summed; `None` if no GPU
/// entry is present.
#[inline]
pub fn gpu_count(spec: &str) -> Option<u32> {
    let mut total: Option<u32> = None;
    for entry in spec.split(',') {
        let e = entry.trim();
        let rest = e.strip_prefix("gres:").or_else(|| e.strip_prefix("gres/")).unwrap_or(e);
        let Some(rest) = rest.strip_prefix("gpu") else { continue };
        // `gres/gpu:fake=2` in allocated TRES repeats `gres/gpu=2`: skip typed ones.
        if rest.starts_with(':') && rest.contains('=') {
            continue;
        }
        let count = match rest.chars().next() {
            None => Some(1),
            Some('=') => rest[1..].parse::<u32>().ok(),
            Some(':') => rest.rsplit(':').next().and_then(|c| c.parse::<u32>().ok()).or(Some(1)),
            _ => None, // e.g. `gpus` is not `gpu`
        };
        if let Some(c) = count {
            total = Some(total.unwrap_or(0).saturating_add(c));
        }
    }
    total
}

/// GPUs in a TRES/GRES string by type: `gpu:h100:8` → `[(Some("h100"),
/// 8)]`, `gres/gpu:2` → `[(None, 2)]`, `gpu:h100:4,gpu:b200:4` → both.
/// Allocated TRES (`gres/gpu=4,gres/gpu:h100=4`) lists the total and then
/// each type: when typed entries are present the untyped total is left out.
/// Empty when no GPU entry is present. The counterpart of [`gpu_count`]
/// for GPU types (a node's `Gres=`, a job's request or allocation).
pub fn gpu_types(spec: &str) -> Vec<(Option<&str>, u32)> {
    let mut typed = Vec::new();
    let mut untyped: Option<u32> = None;
    for entry in spec.split(',') {
        let e = entry.trim();
        let rest = e.strip_prefix("gres:").or_else(|| e.strip_prefix("gres/")).unwrap_or(e);
        let Some(rest) = rest.strip_prefix("gpu") else { continue };
        // `(S:0-1)` socket affinity, as gres.conf-style strings carry.
        let rest = rest.split('(').next().unwrap_or(rest);
        let (ty, count) = match rest.chars().next() {
            None => (None, Some(1)),
            Some('=') => (None, rest[1..].parse::<u32>().ok()),
            Some(':') => {
                let body = &rest[1..];
                match body.split_once([':', '=']) {
                    Some((t, n)) => (Some(t), n.parse::<u32>().ok()),
                    None => match body.parse::<u32>() {
                        Ok(n) => (None, Some(n)),
                        Err(_) => (Some(body), Some(1)),
                    },
                }
            }
            _ => (None, None),
        };
        match (ty, count) {
            (Some(t), Some(n)) if !t.is_empty() => typed.push((Some(t), n)),
            (None, Some(n)) => untyped = Some(untyped.unwrap_or(0).saturating_add(n)),
            _ => {}
        }
    }
    if typed.is_empty() {
        untyped.map(|n| vec![(None, n)]).unwrap_or_default()
    } else {
        typed
    }
}

/// The GPU type of a job from its TRES/GRES string ([`gpu_types`]):
/// `gres:gpu:h100:2`, `gres/gpu:h100`, `gres/gpu=8,gres/gpu:h100=8`
/// (allocated TRES), `gpu:h100:8`; `None` when no entry names a type
/// (`gres:gpu:2`) or when entries name different types (a job holding GPUs
/// of two types is counted untyped, at weight 1). The one reading of a
/// job's type, for the plugins and the reports alike.
pub fn gpu_type(spec: &str) -> Option<&str> {
    let types = gpu_types(spec);
    let first = types.first()?.0?;
    types.iter().all(|&(t, _)| t == Some(first)).then_some(first)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_types_read_every_spelling() {
        type Typed<'a> = &'a [(Option<&'a str>, u32)];
        let cases: &[(&str, Typed)] = &[
            ("gpu:h100:8", &[(Some("h100"), 8)]),
            ("gpu:8", &[(None, 8)]),
            ("gres/gpu:2", &[(None, 2)]),
            ("gres:gpu:fake:4", &[(Some("fake"), 4)]),
            ("gres/gpu:b200", &[(Some("b200"), 1)]),
            ("gpu:h100:4,gpu:b200:4", &[(Some("h100"), 4), (Some("b200"), 4)]),
            ("cpu=4,mem=1G,node=1,billing=4,gres/gpu=4,gres/gpu:h100=4", &[(Some("h100"), 4)]),
            ("cpu=4,gres/gpu=2", &[(None, 2)]),
            ("gpu:h100:8(S:0-1)", &[(Some("h100"), 8)]),
            ("cpu=4,mem=1G", &[]),
            ("gpus:2", &[]),
        ];
        for (spec, want) in cases {
            assert_eq!(gpu_types(spec), want.to_vec(), "{spec}");
            // The same total as the untyped reading wherever both apply
            // (gpu_count does not read gres.conf's socket affinity).
            if spec.contains('(') {
                continue;
            }
            let total: u32 = gpu_types(spec).iter().map(|t| t.1).sum();
            assert_eq!(gpu_count(spec).unwrap_or(0), total, "{spec}");
        }
    }

    #[test]
    fn gpu_strings() {
        let cases: &[(&str, Option<u32>)] = &[
            ("gres:gpu:2", Some(2)),
            ("gres/gpu:2", Some(2)),
            ("gres:gpu:fake:4", Some(4)),
            ("gres:gpu", Some(1)),
            ("gres:gpu:a100:2,gres:gpu:v100:1", Some(3)),
            ("cpu=2,mem=100M,node=1,billing=2,gres/gpu=2,gres/gpu:fake=2", Some(2)),
            ("gres:mps:100", None),
            ("cpu=4,mem=1G", None),
            ("", None),
        ];
        for (s, want) in cases {
            assert_eq!(gpu_count(s), *want, "{s}");
        }
    }

    #[test]
    fn the_one_type_of_a_job() {
        let cases: &[(&str, Option<&str>)] = &[
            ("gres:gpu:h100:2", Some("h100")),
            ("gres/gpu:b200", Some("b200")),
            ("gpu:h100:8", Some("h100")),
            ("cpu=2,mem=100M,node=1,billing=2,gres/gpu=2,gres/gpu:fake=2", Some("fake")),
            ("gres:gpu:2", None),
            ("gres/gpu=4", None),
            ("gres:gpu:a100:2,gres:gpu:v100:1", None),
            ("gres:gpu:a100:2,gres:gpu:a100:1", Some("a100")),
            ("gres:mps:100", None),
            ("gres/gpus:h100=2", None),
            ("", None),
        ];
        for (s, want) in cases {
            assert_eq!(gpu_type(s), *want, "{s}");
        }
    }
}

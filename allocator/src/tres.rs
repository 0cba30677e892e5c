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

#[cfg(test)]
mod tests {
    use super::*;

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
}

//! The samples of the gateway's own `/metrics` exposition, read back for
//! the status page: counters summed by a label, and a histogram's
//! quantiles estimated from its buckets as Prometheus's
//! `histogram_quantile` does (linear interpolation within the bucket).

use std::collections::BTreeMap;

use serde_json::{Map, Value};

/// One sample: its name, labels and value.
struct Sample {
    name: String,
    labels: Vec<(String, String)>,
    value: f64,
}

impl Sample {
    fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(name, _)| name == key)
            .map(|(_, value)| value.as_str())
    }

    fn has(&self, wanted: &[(&str, &str)]) -> bool {
        wanted
            .iter()
            .all(|(key, value)| self.label(key) == Some(value))
    }
}

pub(crate) struct Samples(Vec<Sample>);

impl Samples {
    /// Reads the text exposition; lines it cannot read are left out.
    pub(crate) fn parse(text: &str) -> Samples {
        Samples(
            text.lines()
                .filter(|line| !line.starts_with('#'))
                .filter_map(parse_line)
                .collect(),
        )
    }

    /// The sum of `name`'s samples with `wanted` labels.
    pub(crate) fn sum(&self, name: &str, wanted: &[(&str, &str)]) -> f64 {
        self.0
            .iter()
            .filter(|sample| sample.name == name && sample.has(wanted))
            .map(|sample| sample.value)
            .sum()
    }

    /// `name`'s samples summed by the value of `label`.
    pub(crate) fn sum_by(&self, name: &str, label: &str) -> Value {
        let mut sums: BTreeMap<&str, f64> = BTreeMap::new();
        for sample in self.0.iter().filter(|sample| sample.name == name) {
            if let Some(value) = sample.label(label) {
                *sums.entry(value).or_default() += sample.value;
            }
        }
        let object: Map<String, Value> = sums
            .into_iter()
            .map(|(key, sum)| (key.to_owned(), Value::from(sum)))
            .collect();
        Value::Object(object)
    }

    /// The `q` quantile of histogram `name` (its `_bucket` samples with
    /// `wanted` labels, summed), or None while it has no observation.
    pub(crate) fn quantile(&self, name: &str, wanted: &[(&str, &str)], q: f64) -> Option<f64> {
        let bucket = format!("{name}_bucket");
        let mut buckets: BTreeMap<u64, (f64, f64)> = BTreeMap::new();
        for sample in self
            .0
            .iter()
            .filter(|sample| sample.name == bucket && sample.has(wanted))
        {
            let bound = match sample.label("le")? {
                "+Inf" => f64::INFINITY,
                other => other.parse().ok()?,
            };
            // Ordered by the bound's bits: the bounds are positive.
            buckets.entry(bound.to_bits()).or_insert((bound, 0.0)).1 += sample.value;
        }
        let total = buckets.values().last()?.1;
        if total <= 0.0 {
            return None;
        }
        let rank = q * total;
        let mut below = (0.0, 0.0);
        for (bound, count) in buckets.into_values() {
            if count >= rank {
                if bound.is_infinite() {
                    return Some(below.0);
                }
                let share = (rank - below.1) / (count - below.1).max(f64::MIN_POSITIVE);
                return Some(below.0 + (bound - below.0) * share);
            }
            below = (bound, count);
        }
        Some(below.0)
    }
}

/// `name{key="value",...} value`, or `name value`.
fn parse_line(line: &str) -> Option<Sample> {
    let (series, value) = line.rsplit_once(' ')?;
    let value = value.parse().ok()?;
    let Some((name, labels)) = series.split_once('{') else {
        return Some(Sample {
            name: series.to_owned(),
            labels: Vec::new(),
            value,
        });
    };
    Some(Sample {
        name: name.to_owned(),
        labels: parse_labels(labels.strip_suffix('}')?)?,
        value,
    })
}

/// `key="value",...`, the values escaped as OpenMetrics escapes them.
fn parse_labels(mut text: &str) -> Option<Vec<(String, String)>> {
    let mut labels = Vec::new();
    while !text.is_empty() {
        let (key, rest) = text.split_once("=\"")?;
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            match chars.next()? {
                (_, '\\') => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    other => value.push(other),
                },
                (at, '"') => break at,
                (_, other) => value.push(other),
            }
        };
        labels.push((key.to_owned(), value));
        text = rest[end + 1..]
            .strip_prefix(',')
            .unwrap_or(&rest[end + 1..]);
    }
    Some(labels)
}

#[cfg(test)]
mod tests {
    use super::Samples;

    #[test]
    fn quantiles_interpolate_within_buckets_as_prometheus_does() {
        let text = "\
# TYPE t histogram
t_bucket{le=\"0.1\",f=\"a\"} 50
t_bucket{le=\"0.2\",f=\"a\"} 100
t_bucket{le=\"+Inf\",f=\"a\"} 100
t_bucket{le=\"0.1\",f=\"b\\\"q\"} 0
t_bucket{le=\"+Inf\",f=\"b\\\"q\"} 0
";
        let samples = Samples::parse(text);
        let p50 = samples.quantile("t", &[("f", "a")], 0.5).expect("a p50");
        assert!((p50 - 0.1).abs() < 1e-9, "{p50}");
        let p99 = samples.quantile("t", &[("f", "a")], 0.99).expect("a p99");
        assert!((p99 - 0.198).abs() < 1e-9, "{p99}");
        assert_eq!(samples.quantile("t", &[("f", "b\"q")], 0.5), None);
        assert_eq!(samples.sum("t_bucket", &[("le", "+Inf")]), 100.0);
    }
}

//! The few statistics the figures are made of: medians, spreads and round-by-round ratios.
/// The median of `values[i] / reference[i]`, round by round (rounds missing in either, or
/// not finite, left out).
pub(super) fn median_of_ratios(values: &[f64], reference: &[f64]) -> f64 {
    median(values.iter().zip(reference).map(|(v, r)| v / r))
}

/// Median, min and max of the finite values of `v`; None when there is none.
pub(super) fn spread(v: impl Iterator<Item = f64>) -> Option<(f64, f64, f64)> {
    let v: Vec<f64> = v.filter(|x| x.is_finite()).collect();
    let min = v.iter().copied().reduce(f64::min)?;
    let max = v.iter().copied().reduce(f64::max)?;
    Some((median(v.into_iter()), min, max))
}

pub(super) fn median(it: impl Iterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = it.filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_are_taken_round_by_round() {
        // The host slowed down in the third round: each round's ratio still says 1.2, 1.0
        // and 1.1, where the ratio of the two medians (200 / 200) says 1.0.
        let values = [120.0, 200.0, 660.0];
        let reference = [100.0, 200.0, 600.0];
        assert!((median_of_ratios(&values, &reference) - 1.1).abs() < 1e-9);
        assert!((median(values.into_iter()) / median(reference.into_iter()) - 1.0).abs() < 1e-9);
        // A round without a figure (NaN) or missing on one side is left out.
        assert!(
            (median_of_ratios(&[120.0, f64::NAN, 330.0, 7.0], &[100.0, 200.0, 300.0]) - 1.15).abs() < 1e-9
        );
        assert!(median_of_ratios(&[], &[1.0]).is_nan());
    }

    #[test]
    fn spread_of_the_finite_values() {
        assert_eq!(spread([1.1, f64::NAN, 0.9, 1.0].into_iter()), Some((1.0, 0.9, 1.1)));
        assert_eq!(spread([f64::INFINITY].into_iter()), None);
        assert_eq!(spread(std::iter::empty()), None);
    }
}

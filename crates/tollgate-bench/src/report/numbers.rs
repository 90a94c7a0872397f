//! The number formats every report shares, and the two pieces of arithmetic behind them.

use std::time::Duration;

/// `a / b`, 0 when `b` is 0 (an empty cell has no rate).
pub(crate) fn per(a: f64, b: f64) -> f64 {
    if b > 0.0 { a / b } else { 0.0 }
}

/// The median of `values` (the mean of the middle two for an even count); `None` for none.
pub(crate) fn median(mut values: Vec<f64>) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(values[n / 2]),
        _ => Some((values[n / 2 - 1] + values[n / 2]) / 2.0),
    }
}

/// A whole number with thousands separators: `1,234,567`.
pub(crate) fn thousands(x: f64) -> String {
    let digits = format!("{:.0}", x.max(0.0));
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// A ratio that may be tiny: three decimals from 0.1 up, three significant digits below.
pub(crate) fn small(x: f64) -> String {
    if x == 0.0 || !x.is_finite() {
        return format!("{x}");
    }
    if x >= 0.1 {
        return format!("{x:.3}");
    }
    let decimals = (2.0 - x.abs().log10().floor()) as usize;
    format!("{x:.decimals$}")
}

/// A signed percentage with two decimals: `+207.50%`, `0.00%`, `-5.00%`.
pub(crate) fn percent(fraction: f64) -> String {
    let p = fraction * 100.0;
    if p.abs() < 0.005 {
        "0.00%".into()
    } else {
        format!("{p:+.2}%")
    }
}

/// Microseconds: one decimal below 100 µs, whole above.
pub(crate) fn micros(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us < 100.0 {
        format!("{us:.1}")
    } else {
        format!("{us:.0}")
    }
}

/// A chart's label: `950`, `12.3k`, `4.5M`, and one decimal below 10 (`2.5`) so that a small
/// axis does not read `0, 0, 1, 1`.
pub(crate) fn compact(x: f64) -> String {
    if x >= 1e6 {
        format!("{:.1}M", x / 1e6)
    } else if x >= 1e3 {
        format!("{:.1}k", x / 1e3)
    } else if x >= 10.0 || x.fract() == 0.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.1}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_well() {
        assert_eq!(thousands(0.0), "0");
        assert_eq!(thousands(999.4), "999");
        assert_eq!(thousands(1234567.0), "1,234,567");
        assert_eq!(percent(0.0), "0.00%");
        assert_eq!(small(0.0), "0");
        assert_eq!(small(3.0), "3.000");
        assert_eq!(small(0.1), "0.100");
        assert_eq!(small(0.0123), "0.0123");
        assert_eq!(small(0.0000214), "0.0000214");
        assert_eq!(percent(123.0 / 40.0 - 1.0), "+207.50%");
        assert_eq!(percent(38.0 / 40.0 - 1.0), "-5.00%");
        assert_eq!(per(1.0, 0.0), 0.0);
    }

    #[test]
    fn medians_of_odd_and_even_counts() {
        assert_eq!(median(vec![]), None);
        assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), Some(2.5));
    }

    #[test]
    fn micros_keep_useful_digits() {
        assert_eq!(micros(Duration::from_nanos(1_240)), "1.2");
        assert_eq!(micros(Duration::from_nanos(99_940)), "99.9");
        assert_eq!(micros(Duration::from_micros(1_234)), "1234");
    }

    #[test]
    fn chart_labels_are_short() {
        assert_eq!(compact(0.0), "0");
        assert_eq!(compact(2.5), "2.5");
        assert_eq!(compact(2.0), "2");
        assert_eq!(compact(950.0), "950");
        assert_eq!(compact(12_345.0), "12.3k");
        assert_eq!(compact(4_500_000.0), "4.5M");
    }
}

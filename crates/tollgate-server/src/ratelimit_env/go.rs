//! Values read as envoyproxy/ratelimit reads its environment (kelseyhightower/envconfig over
//! Go's `strconv` and `time`): a value upstream would refuse at start is refused here, and one
//! it takes means here what it means there.

use std::collections::BTreeMap;
use std::time::Duration;

/// `strconv.ParseBool`: `1 t T TRUE true True` and `0 f F FALSE false False`, nothing else.
pub(super) fn bool(text: &str) -> Result<bool, String> {
    match text {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        _ => Err(format!(
            "{text:?} is not a boolean as Go reads one (true, false, 1, 0, t, f, TRUE, FALSE, \
             True, False)"
        )),
    }
}

/// `strconv.ParseInt(text, 0, 64)`, as envconfig calls it: an optional sign, then decimal, or
/// `0x`, `0o`, `0b` or a leading `0` (octal), with `_` between digits.
pub(super) fn int(text: &str) -> Result<i64, String> {
    let bad = || format!("{text:?} is not a whole number");
    let (negative, rest) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let lower = rest.to_ascii_lowercase();
    let (radix, digits) = if let Some(d) = lower.strip_prefix("0x") {
        (16, d)
    } else if let Some(d) = lower.strip_prefix("0o") {
        (8, d)
    } else if let Some(d) = lower.strip_prefix("0b") {
        (2, d)
    } else if lower.len() > 1 && lower.starts_with('0') {
        (8, &lower[1..])
    } else {
        (10, lower.as_str())
    };
    // Go takes `_` only between digits (or after the base prefix).
    if digits.is_empty() || digits.ends_with('_') || digits.contains("__") {
        return Err(bad());
    }
    if digits.starts_with('_') && radix == 10 {
        return Err(bad());
    }
    let plain: String = digits.chars().filter(|c| *c != '_').collect();
    let magnitude = u64::from_str_radix(&plain, radix).map_err(|_| bad())?;
    if negative {
        0_i64
            .checked_sub_unsigned(magnitude)
            .ok_or_else(|| format!("{text:?} is out of range"))
    } else {
        i64::try_from(magnitude).map_err(|_| format!("{text:?} is out of range"))
    }
}

/// `strconv.ParseFloat`: decimal and exponent forms, `inf` and `nan` (Go's hexadecimal floats
/// are not taken).
pub(super) fn float(text: &str) -> Result<f64, String> {
    let plain = text.strip_prefix('+').unwrap_or(text);
    plain
        .parse::<f64>()
        .map_err(|_| format!("{text:?} is not a number"))
}

/// `time.ParseDuration`: `0`, or a sequence of decimal numbers, each with a unit (`ns`, `us`,
/// `µs`, `ms`, `s`, `m`, `h`), such as `300ms`, `1.5h` or `2h45m`. A negative duration is
/// refused: no setting upstream gives one a meaning.
pub(super) fn duration(text: &str) -> Result<Duration, String> {
    let bad = |why: &str| {
        format!(
            "{text:?} is not a duration ({why}); write one such as \"300ms\", \"10s\" or \"1h30m\""
        )
    };
    let rest = text.strip_prefix('+').unwrap_or(text);
    if rest.starts_with('-') {
        return if rest == "-0" {
            Ok(Duration::ZERO)
        } else {
            Err(bad("negative"))
        };
    }
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(bad("empty"));
    }
    let mut nanos: u128 = 0;
    let mut s = rest;
    while !s.is_empty() {
        let number_end = s
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(s.len());
        let number = &s[..number_end];
        if number.is_empty() || number == "." || number.matches('.').count() > 1 {
            return Err(bad("a number is missing"));
        }
        s = &s[number_end..];
        let unit_end = s
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(s.len());
        let unit = &s[..unit_end];
        s = &s[unit_end..];
        let scale: u128 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            "" => return Err(bad("a unit is missing")),
            _ => return Err(bad(&format!("unknown unit {unit:?}"))),
        };
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        let whole: u128 = if whole.is_empty() {
            0
        } else {
            whole.parse().map_err(|_| bad("out of range"))?
        };
        let mut part = whole
            .checked_mul(scale)
            .ok_or_else(|| bad("out of range"))?;
        // The fraction, to the nanosecond, as Go rounds it (down).
        let mut place = scale;
        for digit in fraction.bytes() {
            place /= 10;
            part = part
                .checked_add(u128::from(digit - b'0') * place)
                .ok_or_else(|| bad("out of range"))?;
        }
        nanos = nanos.checked_add(part).ok_or_else(|| bad("out of range"))?;
    }
    // Go's durations are int64 nanoseconds: about 292 years.
    if nanos > i64::MAX as u128 {
        return Err(bad("out of range"));
    }
    Ok(Duration::from_nanos(nanos as u64))
}

/// envconfig's map: `k1:v1,k2:v2`, each item exactly one `:`; an empty value is no map.
pub(super) fn map(text: &str) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    if text.is_empty() {
        return Ok(out);
    }
    for item in text.split(',') {
        let mut parts = item.split(':');
        match (parts.next(), parts.next(), parts.next()) {
            (Some(k), Some(v), None) => {
                out.insert(k.to_owned(), v.to_owned());
            }
            _ => {
                return Err(format!(
                    "{item:?} is not a map item: write key:value pairs separated by commas"
                ));
            }
        }
    }
    Ok(out)
}

/// `CONFIG_GRPC_XDS_NODE_METADATA`, as upstream's xDS client splits it: items separated by
/// commas, each `key=value` (split at its first `=`); an item without `=` is skipped, as
/// upstream skips it.
pub(super) fn node_metadata(text: &str) -> BTreeMap<String, String> {
    text.split(',')
        .filter_map(|item| item.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn booleans_are_go_booleans() {
        for yes in ["1", "t", "T", "TRUE", "true", "True"] {
            assert_eq!(bool(yes), Ok(true), "{yes}");
        }
        for no in ["0", "f", "F", "FALSE", "false", "False"] {
            assert_eq!(bool(no), Ok(false), "{no}");
        }
        for neither in ["yes", "on", "tRUE", "", " true", "2"] {
            let e = bool(neither).unwrap_err();
            assert!(e.contains("not a boolean"), "{neither}: {e}");
        }
    }

    #[test]
    fn integers_take_go_bases_and_underscores() {
        assert_eq!(int("8080"), Ok(8080));
        assert_eq!(int("-3"), Ok(-3));
        assert_eq!(int("+3"), Ok(3));
        assert_eq!(int("0x1F"), Ok(31));
        assert_eq!(int("0o17"), Ok(15));
        assert_eq!(int("017"), Ok(15));
        assert_eq!(int("0b101"), Ok(5));
        assert_eq!(int("1_000"), Ok(1000));
        assert_eq!(int("0"), Ok(0));
        assert_eq!(int("-9223372036854775808"), Ok(i64::MIN));
        for bad in ["", "8080 ", "1__0", "1_", "_1", "09", "0x", "1.5", "ten"] {
            assert!(int(bad).is_err(), "{bad:?}");
        }
        assert!(int("9223372036854775808").unwrap_err().contains("range"));
    }

    #[test]
    fn floats_take_exponents() {
        assert_eq!(float("0.8"), Ok(0.8));
        assert_eq!(float("1e-1"), Ok(0.1));
        assert_eq!(float("+2"), Ok(2.0));
        assert!(float("0,8").is_err());
        assert!(float("").is_err());
    }

    #[test]
    fn durations_are_go_durations() {
        let ms = Duration::from_millis;
        assert_eq!(duration("0"), Ok(Duration::ZERO));
        assert_eq!(duration("10s"), Ok(ms(10_000)));
        assert_eq!(duration("300ms"), Ok(ms(300)));
        assert_eq!(duration("1h30m"), Ok(ms(5_400_000)));
        assert_eq!(duration("1.5h"), Ok(ms(5_400_000)));
        assert_eq!(duration(".5s"), Ok(ms(500)));
        assert_eq!(duration("2us"), Ok(Duration::from_micros(2)));
        assert_eq!(duration("2µs"), Ok(Duration::from_micros(2)));
        assert_eq!(duration("2μs"), Ok(Duration::from_micros(2)));
        assert_eq!(duration("1ns"), Ok(Duration::from_nanos(1)));
        assert_eq!(duration("1.0000000009s"), Ok(Duration::from_secs(1)));
        for bad in ["", "10", "1d", "s", "1.2.3s", "-1s", "1 s", "24H", "."] {
            let e = duration(bad).unwrap_err();
            assert!(e.contains("not a duration"), "{bad:?}: {e}");
        }
        assert!(duration("3000000h").unwrap_err().contains("out of range"));
        // A whole part near u128::MAX with a fraction on top: out of range, not a wrap.
        assert!(
            duration("340282366920938463463374607431768211.999us")
                .unwrap_err()
                .contains("out of range")
        );
    }

    #[test]
    fn maps_are_colon_pairs() {
        let m = map("a:1,b:").unwrap();
        assert_eq!(m.get("a").map(String::as_str), Some("1"));
        assert_eq!(m.get("b").map(String::as_str), Some(""));
        assert!(map("").unwrap().is_empty());
        assert!(map("a:1:2").unwrap_err().contains("\"a:1:2\""));
        assert!(map("a").is_err());
        assert!(map("a:1,").is_err());
    }

    #[test]
    fn node_metadata_is_split_at_the_first_equals_sign() {
        let m = node_metadata("zone=eu=1,bare,k=");
        assert_eq!(m.get("zone").map(String::as_str), Some("eu=1"));
        assert_eq!(m.get("k").map(String::as_str), Some(""));
        assert_eq!(m.len(), 2);
    }
}

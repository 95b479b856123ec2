//! How the sentences and tables write numbers: percentages, values with
//! their units, lists.

use super::super::svg::sig3;

/// `a` against `b` in percent: "+12 %", "−24.7 %".
pub fn percent(a: f64, b: f64) -> String {
    signed(100.0 * (a - b) / b)
}

/// `a` against `b` in words: "16.6 % less", "5.15 % more".
pub fn more_or_less(a: f64, b: f64) -> String {
    let p = 100.0 * (a - b) / b;
    format!("{} % {}", sig3(p.abs()), if p < 0.0 { "less" } else { "more" })
}

/// A signed percentage to 3 significant figures, with a real minus sign.
pub fn signed(p: f64) -> String {
    let s = sig3(p.abs());
    if p < 0.0 {
        format!("−{s} %")
    } else {
        format!("+{s} %")
    }
}

/// A value with its unit: "116 µs", "39800 req/s".
pub fn with_unit(v: f64, unit: &str) -> String {
    match unit {
        "" | "x" => sig3(v),
        "%" => format!("{} %", sig3(v)),
        u => format!("{} {u}", sig3(v)),
    }
}

/// "a, b and c".
pub fn listed(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words() {
        assert_eq!(percent(75.5, 100.0), "−24.5 %");
        assert_eq!(signed(2.4), "+2.40 %");
        assert_eq!(more_or_less(83.4, 100.0), "16.6 % less");
        assert_eq!(listed(&["a".into(), "b".into(), "c".into()]), "a, b and c");
    }
}

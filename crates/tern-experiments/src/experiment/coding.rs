//! E4's figures of one load in one coding, shared by its steady state and
//! its burst: the measurements, with the bytes per response and the gain
//! beside them, and the table row.

use tern_lab::load;
use tern_lab::probe::figure::Better;
use tern_lab::store::Measurement;

/// E4's measurements of one load in one coding: the load's own, with the
/// bytes per response and the gain against identity beside them, at `size`
/// (`None`: a mix of sizes).
pub(super) fn on_the_wire(mut ms: Vec<Measurement>, bytes: f64, gain: f64, size: Option<u64>) -> Vec<Measurement> {
    let mut wire = ms[0].clone();
    (wire.metric, wire.value, wire.unit, wire.better) = ("response_bytes".into(), bytes, "B".into(), Better::Lower);
    let mut gained = wire.clone();
    (gained.metric, gained.value, gained.unit, gained.better) =
        ("compression_gain".into(), gain * 100.0, "%".into(), Better::Higher);
    ms.extend([wire, gained]);
    for m in &mut ms {
        m.size = size;
    }
    ms
}

/// E4's table row: page, coding (or mode), conns, bytes, gain, req/s,
/// mean us, p99 us.
pub(super) fn compression_row(
    page: String,
    coding: &str,
    connections: usize,
    bytes: f64,
    gain: f64,
    report: &load::Report,
) -> Vec<String> {
    vec![
        page,
        coding.into(),
        connections.to_string(),
        format!("{bytes:.0}"),
        format!("{:.1}%", gain * 100.0),
        format!("{:.0}", report.requests_per_s),
        format!("{:.0}", report.latency.service.mean_us),
        report.latency.service.p99_us.to_string(),
    ]
}

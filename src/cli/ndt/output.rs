//! Text and JSON output of `ptxflow ndt`.

use nalgebra::Isometry3;
use ptxflow::ndt::{NdtResult, NeighbourSearch};
use ptxflow::Choice;

/// A number as JSON (non-finite values become null).
pub fn num(v: f64) -> String {
    if v == 0.0 {
        // No "-0".
        "0".into()
    } else if v.is_finite() {
        format!("{v}")
    } else {
        "null".into()
    }
}

/// A string as JSON.
pub fn jstr(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            '\r' => o.push_str("\\r"),
            '\t' => o.push_str("\\t"),
            c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04x}", c as u32)),
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

fn matrix_json(r: &NdtResult) -> String {
    let rows: Vec<String> = r
        .matrix_row_major()
        .iter()
        .map(|row| {
            format!(
                "[{}]",
                row.iter().map(|v| num(*v)).collect::<Vec<_>>().join(",")
            )
        })
        .collect();
    format!("[{}]", rows.join(","))
}

/// "x y z roll pitch yaw" of a pose (metres, radians), the `--init` convention.
pub fn xyzrpy(t: &Isometry3<f64>) -> [f64; 6] {
    let (r, p, y) = t.rotation.euler_angles();
    let v = t.translation.vector;
    [v.x, v.y, v.z, r, p, y]
}

/// The result fields every JSON line carries.
pub fn result_fields(r: &NdtResult) -> String {
    format!(
        "\"t_target_source\":{},\"iterations\":{},\"evaluations\":{},\"stop\":\"{}\",\"converged\":{},\
         \"score\":{},\"likelihood_per_point\":{},\"correspondences\":{},\"source_points\":{}",
        matrix_json(r),
        r.iterations,
        r.evaluations,
        r.stop,
        r.stop.converged(),
        num(r.score),
        num(r.likelihood_per_point),
        r.correspondences,
        r.source_points
    )
}

/// Every hypothesis of a source: its initial pose and result.
pub fn hypotheses_json(inits: &[Isometry3<f64>], results: &[NdtResult]) -> String {
    let items: Vec<String> = inits
        .iter()
        .zip(results)
        .map(|(i, r)| {
            let init: Vec<String> = xyzrpy(i).iter().map(|v| num(*v)).collect();
            format!("{{\"init\":[{}],{}}}", init.join(","), result_fields(r))
        })
        .collect();
    format!("[{}]", items.join(","))
}

/// The device fields: which ran and why.
pub fn device_fields(choice: &Choice) -> String {
    format!(
        "\"device\":\"{}\",\"device_reason\":{}",
        choice.device,
        jstr(&choice.reason)
    )
}

/// The text block of one result (the single-pair output).
pub fn print_result(r: &NdtResult) {
    println!("T_target_source:");
    for row in r.matrix_row_major() {
        println!(
            "  {:>12.8} {:>12.8} {:>12.8} {:>12.8}",
            row[0], row[1], row[2], row[3]
        );
    }
    println!(
        "iterations: {} ({} evaluations)",
        r.iterations, r.evaluations
    );
    println!(
        "stop: {}{}",
        r.stop,
        if r.stop.converged() {
            ""
        } else {
            " (NOT converged)"
        }
    );
    println!(
        "score: {:.3} ({:.5} per point), {} of {} source points matched a voxel",
        r.score, r.likelihood_per_point, r.correspondences, r.source_points
    );
}

/// One text line per source of a sequence: the pose as x y z (m) roll pitch yaw (deg).
pub fn result_line(index: usize, name: &str, r: &NdtResult, extra: &str) -> String {
    let v = xyzrpy(&r.t_target_source);
    format!(
        "{index:>5} {name}: {:>9.4} {:>9.4} {:>9.4} m {:>8.3} {:>8.3} {:>8.3} deg, {} iterations, {:.4} per point{}{extra}",
        v[0],
        v[1],
        v[2],
        v[3].to_degrees(),
        v[4].to_degrees(),
        v[5].to_degrees(),
        r.iterations,
        r.likelihood_per_point,
        if r.stop.converged() { "" } else { " (NOT converged)" },
    )
}

/// The points line of the single-pair text output.
pub fn points_line(
    target_raw: usize,
    target: usize,
    source_raw: usize,
    source: usize,
    search: NeighbourSearch,
) -> String {
    format!(
        "points: target {target_raw} -> {target}, source {source_raw} -> {source} (voxel grid), search {}",
        search.name()
    )
}

use super::*;

#[test]
fn the_window_choice_counts_points_within_ten_percent_then_the_worst() {
    // Window 0 fits two points of three, window 1 all three: 1. Without point 2,
    // both fit both; window 0's worst is smaller: 0.
    let err = vec![vec![0.01, 0.02, 0.30], vec![0.05, -0.08, 0.09]];
    assert_eq!(choose(&err, &[0, 1, 2]), 1);
    assert_eq!(choose(&err, &[0, 1]), 0);
}

/// The leave-one-out table of docs/calibration.md (several minutes):
/// `cargo test --release -p zblk-lab loo -- --ignored --nocapture`.
#[test]
#[ignore = "measures docs/calibration.md's leave-one-out table (several minutes): cargo test --release -p zblk-lab loo -- --ignored --nocapture"]
fn leave_one_out_table() {
    let rows = leave_one_out(&LooOptions::default(), &mut |p| eprintln!("loo: {p}")).unwrap();
    println!("{}", table(&rows));
    assert_eq!(rows.len(), 3 + 1 + 1 + 5);
}

/// The window family table of docs/calibration.md (about 30 s):
/// `cargo test --release -p zblk-lab window_family -- --ignored --nocapture`.
#[test]
#[ignore = "measures docs/calibration.md's window family table (about 30 s): cargo test --release -p zblk-lab window_family -- --ignored --nocapture"]
fn window_family_table() {
    let rows = window_family(&LooOptions::default(), &mut |p| eprintln!("family: {p}")).unwrap();
    println!("{}", family_table(&rows));
    assert_eq!(rows.len(), FAMILY_WINDOWS.len() * FAMILY_RESUME_REVS.len());
}

/// The geometry grid of docs/calibration.md, *Revision 3* (about 15 s):
/// `cargo test --release -p zblk-lab geometry_family -- --ignored --nocapture`.
#[test]
#[ignore = "measures docs/calibration.md's geometry grid (about 15 s): cargo test --release -p zblk-lab geometry_family -- --ignored --nocapture"]
fn geometry_family_table() {
    let rows = geometry_family(&LooOptions::default(), &mut |p| eprintln!("geometry: {p}")).unwrap();
    println!("{}", family_table(&rows));
    let err: Vec<Vec<f64>> = rows.iter().map(|m| m.errors.clone()).collect();
    let best = &rows[choose(&err, &[0, 1, 2, 3, 4])];
    println!("chosen: window {}, zone advance {:?}", best.window, best.zone_advance);
    assert_eq!(rows.len(), WINDOWS.len() * advance_grid().count());
}

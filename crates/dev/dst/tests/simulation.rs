//! The simulation inside the test run: a batch of schedules holds the invariant, a
//! schedule replays exactly from its seed, and the shrinker keeps a failure failing.

use awsmp_dst::{run_schedule, seed_of};

#[test]
fn a_batch_of_schedules_holds_the_conservation_invariant() {
    for n in 0..60 {
        let outcome = run_schedule(seed_of(7, n), &[]);
        assert!(
            outcome.violations.is_empty(),
            "seed {}: {:#?}\nreplay: cargo run -p awsmp-dst -- --replay {}",
            outcome.seed,
            outcome.violations,
            outcome.seed
        );
    }
}

#[test]
fn a_schedule_replays_exactly_from_its_seed() {
    let seed = seed_of(11, 3);
    let first = run_schedule(seed, &[]);
    let again = run_schedule(seed, &[]);
    assert_eq!(first.faults, again.faults);
    assert!(!first.faults.is_empty(), "the schedule injects faults");
    // Masking a fault changes the schedule, deterministically too.
    let point = first.faults[0].point;
    let masked = run_schedule(seed, &[point]);
    assert!(masked.faults.iter().all(|f| f.point != point));
    assert_eq!(masked.faults, run_schedule(seed, &[point]).faults);
}

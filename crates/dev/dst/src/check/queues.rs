//! Queues after a settled schedule: a message that is no work message is never deleted
//! (every receive reports it failed, so SQS keeps it and dead-letters it after the
//! redrive policy's receives), and no work message is ever dead-lettered (the pipeline
//! never gives up on work it was handed).

use crate::scenario::GARBAGE;
use crate::world::World;

/// Every violation of it in `world` (empty when it holds).
pub fn check(world: &World) -> Vec<String> {
    let mut violations = Vec::new();
    for body in &world.dead_letters {
        if body != GARBAGE {
            violations.push(format!("a work message was dead-lettered: {body}"));
        }
    }
    let kept = world
        .queued
        .iter()
        .chain(&world.dead_letters)
        .any(|b| b == GARBAGE);
    if world.garbage_sent && !kept {
        violations.push(format!(
            "the message {GARBAGE} (no work message) was deleted: a handler took it as done"
        ));
    }
    violations
}

//! The simulator's clock: real time by default, or a fixed instant, or real time
//! shifted by an offset, so tests and the local stack can drive the time rules
//! (24 h window, month-end grace, token expiry, deprovisioning hour).

use chrono::{DateTime, TimeDelta, Utc};
use serde::{Deserialize, Serialize};

/// How the simulator tells the time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(tag = "mode", rename_all = "snake_case", deny_unknown_fields)]
pub enum ClockSetting {
    /// The machine's UTC clock.
    #[default]
    Real,
    /// Always this instant (until set or advanced).
    Fixed {
        /// The instant the simulator reports, RFC 3339.
        at: DateTime<Utc>,
    },
    /// The machine's UTC clock plus this many seconds (negative: in the past).
    Offset {
        /// Seconds added to real time.
        seconds: i64,
    },
}

/// The clock every time rule of the simulator reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SimClock {
    setting: ClockSetting,
}

impl SimClock {
    /// A clock following `setting`.
    pub fn new(setting: ClockSetting) -> Self {
        Self { setting }
    }

    /// The current setting.
    pub fn setting(&self) -> ClockSetting {
        self.setting
    }

    /// Replaces the setting.
    pub fn set(&mut self, setting: ClockSetting) {
        self.setting = setting;
    }

    /// The simulator's current time.
    pub fn now(&self) -> DateTime<Utc> {
        self.now_given_real(Utc::now())
    }

    /// The simulator's time when the machine's clock reads `real`.
    pub fn now_given_real(&self, real: DateTime<Utc>) -> DateTime<Utc> {
        match self.setting {
            ClockSetting::Real => real,
            ClockSetting::Fixed { at } => at,
            ClockSetting::Offset { seconds } => real + TimeDelta::seconds(seconds),
        }
    }

    /// Moves the simulator's time forward by `seconds` (backward if negative): a fixed
    /// clock moves its instant, a real or offset clock grows its offset.
    pub fn advance(&mut self, seconds: i64) {
        self.setting = match self.setting {
            ClockSetting::Real => ClockSetting::Offset { seconds },
            ClockSetting::Fixed { at } => ClockSetting::Fixed {
                at: at + TimeDelta::seconds(seconds),
            },
            ClockSetting::Offset { seconds: current } => ClockSetting::Offset {
                seconds: current.saturating_add(seconds),
            },
        };
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::test_support::at;

    #[test]
    fn fixed_clock_ignores_real_time_and_advances() {
        let mut clock = SimClock::new(ClockSetting::Fixed {
            at: at("2026-03-31T23:00:00Z"),
        });
        assert_eq!(
            clock.now_given_real(at("2000-01-01T00:00:00Z")),
            at("2026-03-31T23:00:00Z")
        );
        clock.advance(3600);
        assert_eq!(clock.now(), at("2026-04-01T00:00:00Z"));
    }

    #[test]
    fn real_clock_advances_into_an_offset() {
        let mut clock = SimClock::default();
        let real = at("2026-05-01T10:00:00Z");
        assert_eq!(clock.now_given_real(real), real);
        clock.advance(-90);
        clock.advance(30);
        assert_eq!(clock.setting(), ClockSetting::Offset { seconds: -60 });
        assert_eq!(clock.now_given_real(real), at("2026-05-01T09:59:00Z"));
    }

    #[test]
    fn setting_round_trips_as_tagged_json() {
        let json = r#"{"mode":"fixed","at":"2026-03-31T23:00:00Z"}"#;
        let setting: ClockSetting = serde_json::from_str(json).expect("parses");
        assert_eq!(
            setting,
            ClockSetting::Fixed {
                at: at("2026-03-31T23:00:00Z")
            }
        );
        let offset: ClockSetting =
            serde_json::from_str(r#"{"mode":"offset","seconds":-5}"#).expect("parses");
        assert_eq!(offset, ClockSetting::Offset { seconds: -5 });
    }
}

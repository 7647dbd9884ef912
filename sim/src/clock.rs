//! Model time ⇄ wall time. The model runs `speedup` times faster than the tokio clock (which
//! tests may pause): model `t` happens at wall `start + t / speedup`.

use std::time::Duration;

use tokio::time::Instant;

/// The engine's clock.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    start: Instant,
    speedup: f64,
}

impl Clock {
    /// A clock starting now, `speedup` > 0.
    pub fn start(speedup: f64) -> Self {
        Self { start: Instant::now(), speedup }
    }

    /// The model time now.
    pub fn now(&self) -> Duration {
        self.start.elapsed().mul_f64(self.speedup)
    }

    /// The wall instant of model time `t`.
    pub fn at(&self, t: Duration) -> Instant {
        self.start + self.wall(t)
    }

    /// A model duration in wall time.
    pub fn wall(&self, model: Duration) -> Duration {
        model.div_f64(self.speedup)
    }
}

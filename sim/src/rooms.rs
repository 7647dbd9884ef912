//! The prefill side of the PD rendezvous: one entry per `bootstrap_room`, whose phase both the
//! prefill request and the decode's long poll (`GET /sim/kv/{room}`) watch.
//!
//! ```text
//! Announced (decode polled first) ─┐
//!                                  ├→ Queued (prefill admitted) → Prefilled → Pulling → Transferred
//!                  (prefill first) ┘                                 any of these → Failed
//! ```
//!
//! The prefill response completes at `Transferred`; a prefill that fails (fault, abort, client
//! gone, timeout) marks the room `Failed`, which answers a waiting decode at once.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use tokio::sync::watch;

/// Ended rooms remembered (so a late decode poll gets the answer, not a timeout).
const ENDED_KEPT: usize = 10_000;

/// What the decode learns from the prefill when the KV has been transferred.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvInfo {
    /// The bootstrap room both legs carry.
    pub room: u64,
    /// Prompt tokens prefilled.
    pub prompt_tokens: u32,
    /// Of those, found in the prefill's prefix cache.
    pub cached_tokens: u32,
    /// The prefill DP rank that holds the KV.
    pub prefill_dp_rank: u32,
}

/// A room's phase.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Phase {
    /// A decode polled; no prefill request yet.
    Announced,
    /// The prefill request is admitted.
    Queued,
    /// Prefilled; the KV is ready to transfer.
    Prefilled(KvInfo),
    /// A decode is pulling the KV.
    Pulling(KvInfo),
    /// The KV reached the decode.
    Transferred(KvInfo),
    /// The prefill failed.
    Failed(String),
}

impl Phase {
    fn ended(&self) -> bool {
        matches!(self, Phase::Transferred(_) | Phase::Failed(_))
    }
}

/// A prefill request reused a room that is in flight.
#[derive(Debug, thiserror::Error)]
#[error("bootstrap_room {0} is already in use by another prefill request")]
pub struct RoomInUse(pub u64);

/// The room table.
#[derive(Debug, Default)]
pub struct Rooms(Mutex<Table>);

#[derive(Debug, Default)]
struct Table {
    rooms: HashMap<u64, watch::Sender<Phase>>,
    ended: VecDeque<u64>,
}

impl Table {
    fn set(&mut self, room: u64, phase: Phase) {
        let ended = phase.ended();
        if let Some(tx) = self.rooms.get(&room) {
            tx.send_replace(phase);
        }
        if ended {
            self.ended.push_back(room);
            while self.ended.len() > ENDED_KEPT {
                if let Some(old) = self.ended.pop_front()
                    && self.rooms.get(&old).is_some_and(|tx| tx.borrow().ended())
                {
                    self.rooms.remove(&old);
                }
            }
        }
    }

    fn phase(&self, room: u64) -> Option<Phase> {
        self.rooms.get(&room).map(|tx| tx.borrow().clone())
    }
}

impl Rooms {
    /// A prefill request takes `room`.
    pub fn claim(self: &Arc<Self>, room: u64) -> Result<RoomClaim, RoomInUse> {
        let mut t = self.0.lock().unwrap();
        match t.phase(room) {
            None => {
                t.rooms.insert(room, watch::channel(Phase::Queued).0);
            }
            Some(p) if p == Phase::Announced || p.ended() => t.set(room, Phase::Queued),
            Some(_) => return Err(RoomInUse(room)),
        }
        let rx = t.rooms[&room].subscribe();
        Ok(RoomClaim { rooms: self.clone(), room, rx })
    }

    /// Watches `room` (announcing it if no prefill has claimed it yet).
    pub fn watch(&self, room: u64) -> watch::Receiver<Phase> {
        let mut t = self.0.lock().unwrap();
        t.rooms.entry(room).or_insert_with(|| watch::channel(Phase::Announced).0).subscribe()
    }

    /// Starts pulling a prefilled room's KV; `None` if it is not (or no longer) ready.
    pub fn begin_pull(&self, room: u64) -> Option<KvInfo> {
        let mut t = self.0.lock().unwrap();
        let Some(Phase::Prefilled(info)) = t.phase(room) else { return None };
        t.set(room, Phase::Pulling(info.clone()));
        Some(info)
    }

    /// The pull completed; `false` if the room failed meanwhile.
    pub fn finish_pull(&self, room: u64) -> bool {
        let mut t = self.0.lock().unwrap();
        let Some(Phase::Pulling(info)) = t.phase(room) else { return false };
        t.set(room, Phase::Transferred(info));
        true
    }

    /// A pull was abandoned mid-transfer: the room is ready again.
    pub fn cancel_pull(&self, room: u64) {
        let mut t = self.0.lock().unwrap();
        if let Some(Phase::Pulling(info)) = t.phase(room) {
            t.set(room, Phase::Prefilled(info));
        }
    }

    /// A poll gave up: forget the room if only announced and nobody else waits.
    pub fn abandon(&self, room: u64) {
        let mut t = self.0.lock().unwrap();
        if let Some(tx) = t.rooms.get(&room)
            && *tx.borrow() == Phase::Announced
            && tx.receiver_count() <= 1
        {
            t.rooms.remove(&room);
        }
    }

    fn set(&self, room: u64, phase: Phase) {
        self.0.lock().unwrap().set(room, phase);
    }

    fn phase(&self, room: u64) -> Option<Phase> {
        self.0.lock().unwrap().phase(room)
    }
}

/// A prefill request's hold on its room. Dropped before `Transferred`, it fails the room.
#[derive(Debug)]
pub struct RoomClaim {
    rooms: Arc<Rooms>,
    room: u64,
    rx: watch::Receiver<Phase>,
}

impl RoomClaim {
    /// The bootstrap room this entry is for.
    pub fn room(&self) -> u64 {
        self.room
    }

    /// The prompt is prefilled: the KV is ready for the decode.
    pub fn prefilled(&self, info: KvInfo) {
        self.rooms.set(self.room, Phase::Prefilled(info));
    }

    /// Waits until the decode has the KV (`Ok`) or the room failed (`Err(reason)`).
    pub async fn transferred(&mut self) -> Result<(), String> {
        loop {
            match &*self.rx.borrow_and_update() {
                Phase::Transferred(_) => return Ok(()),
                Phase::Failed(why) => return Err(why.clone()),
                _ => {}
            }
            if self.rx.changed().await.is_err() {
                return Err("the room was dropped".to_owned());
            }
        }
    }

    /// Fails the room (the decode waiting on it fails at once).
    pub fn fail(&self, why: impl Into<String>) {
        if !self.rooms.phase(self.room).is_some_and(|p| p.ended()) {
            self.rooms.set(self.room, Phase::Failed(why.into()));
        }
    }
}

impl Drop for RoomClaim {
    fn drop(&mut self) {
        self.fail("the prefill request ended before the KV transfer");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(room: u64) -> KvInfo {
        KvInfo { room, prompt_tokens: 10, cached_tokens: 2, prefill_dp_rank: 1 }
    }

    #[tokio::test]
    async fn a_decode_that_polls_first_sees_the_prefill() {
        let rooms = Arc::new(Rooms::default());
        let mut rx = rooms.watch(7);
        assert_eq!(*rx.borrow(), Phase::Announced);
        let mut claim = rooms.claim(7).unwrap();
        assert!(rooms.claim(7).is_err(), "a room in flight cannot be claimed twice");
        claim.prefilled(info(7));
        rx.changed().await.unwrap();
        assert_eq!(rooms.begin_pull(7), Some(info(7)));
        assert_eq!(rooms.begin_pull(7), None, "one pull at a time");
        assert!(rooms.finish_pull(7));
        claim.transferred().await.unwrap();
        drop(claim);
        assert_eq!(rooms.phase(7), Some(Phase::Transferred(info(7))), "a finished claim does not fail");
    }

    #[tokio::test]
    async fn a_dropped_claim_fails_the_room() {
        let rooms = Arc::new(Rooms::default());
        let claim = rooms.claim(9).unwrap();
        let rx = rooms.watch(9);
        drop(claim);
        assert!(matches!(&*rx.borrow(), Phase::Failed(_)));
        assert!(rooms.claim(9).is_ok(), "an ended room can be reused");
        rooms.abandon(10);
        let _rx = rooms.watch(10);
        rooms.abandon(10);
        assert_eq!(rooms.phase(10), None);
    }
}

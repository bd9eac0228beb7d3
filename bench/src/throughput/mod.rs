//! S1 (uncontended cycles), S2 (one hot lock), S5 (64 keys, 256 clients),
//! S7 (one read-write lock, 90% reads), S8 (multi-locks of 3 keys of 8) and
//! S12 (a semaphore of 4 permits): closed-loop clients from `load`,
//! every protocol in the same run, reps interleaved so that drift spreads
//! over all protocols.
//!
//! Offers: the scenarios ([`s1`], [`s2`] with its chart's data [`S2Chart`],
//! [`s5`], [`s7`], [`s8`], [`s12`]) and [`measure`], one run measured again
//! while other processes disturb it (S15 measures its cells with it).
//!
//! The parts: `measure` (a run measured, the notes on how), `cell` (the
//! runs of one protocol and client count, as a table row and JSON), and a
//! file per scenario.

mod cell;
mod contention;
mod hot_lock;
mod measure;
mod multi_lock;
mod read_write;
mod semaphore;
mod uncontended;

pub use contention::s5;
pub use hot_lock::{s2, S2Chart};
pub(crate) use measure::measure;
pub use multi_lock::s8;
pub use read_write::s7;
pub use semaphore::s12;
pub use uncontended::s1;

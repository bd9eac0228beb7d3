//! What S16 measures ([`Kind`] of cell): one hot lock at 1, 16 and 64
//! clients, uncontended cycles (a key per client), a read-write lock (90%
//! reads) and an election's hand-over among 4 candidates.

/// Client counts of the hot lock.
pub(super) const HOT_CLIENTS: [usize; 3] = [1, 16, 64];
/// Clients of the uncontended and read-write cells.
pub(super) const CLIENTS: usize = 16;
/// Share of reads in the read-write cell.
pub(super) const READ_FRACTION: f64 = 0.9;
/// Candidates of the election.
pub(super) const CANDIDATES: usize = 4;

#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Kind {
    /// One key, n clients.
    Hot(usize),
    /// n clients, a key each.
    Uncontended(usize),
    /// One read-write lock, n clients, `READ_FRACTION` reads.
    ReadWrite(usize),
    /// n candidates of one election.
    Election(usize),
}

impl Kind {
    pub(super) fn name(self) -> String {
        match self {
            Kind::Hot(n) => format!("hot-{n}"),
            Kind::Uncontended(n) => format!("uncontended-{n}"),
            Kind::ReadWrite(n) => format!("read-write-{n}"),
            Kind::Election(n) => format!("election-{n}"),
        }
    }

    pub(super) fn label(self) -> String {
        match self {
            Kind::Hot(1) => "hot lock, 1 client".into(),
            Kind::Hot(n) => format!("hot lock, {n} clients"),
            Kind::Uncontended(n) => format!("uncontended, {n} keys"),
            Kind::ReadWrite(n) => format!("read-write, {n} (90% rd)"),
            Kind::Election(n) => format!("hand-over, {n} cand."),
        }
    }

    pub(super) fn clients(self) -> usize {
        match self {
            Kind::Hot(n) | Kind::Uncontended(n) | Kind::ReadWrite(n) | Kind::Election(n) => n,
        }
    }
}

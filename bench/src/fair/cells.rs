//! Who runs in each of S17's cells: the two kinds of client (the module's
//! callers, Redisson's fair clients), how many of each, and on which
//! server (with the module or without).

/// Clients of every cell.
pub(super) const CLIENTS: usize = 16;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Module,
    Fair,
}

impl Kind {
    pub(super) fn name(self) -> &'static str {
        match self {
            Kind::Module => "module",
            Kind::Fair => "fair",
        }
    }

    pub(super) fn index(self) -> usize {
        match self {
            Kind::Module => 0,
            Kind::Fair => 1,
        }
    }
}

/// One cell: who runs, on which server.
#[derive(Clone, Copy, Debug)]
pub(super) struct CellSpec {
    pub(super) name: &'static str,
    pub(super) module_clients: usize,
    pub(super) fair_clients: usize,
    /// On the server with the module (else a plain redis-server).
    pub(super) with_module: bool,
}

pub(super) const CELLS: [CellSpec; 4] = [
    CellSpec {
        name: "all-module",
        module_clients: CLIENTS,
        fair_clients: 0,
        with_module: true,
    },
    CellSpec {
        name: "all-fair",
        module_clients: 0,
        fair_clients: CLIENTS,
        with_module: true,
    },
    CellSpec {
        name: "mixed",
        module_clients: CLIENTS / 2,
        fair_clients: CLIENTS - CLIENTS / 2,
        with_module: true,
    },
    CellSpec {
        name: "all-fair-plain",
        module_clients: 0,
        fair_clients: CLIENTS,
        with_module: false,
    },
];

impl CellSpec {
    pub(super) fn clients(&self, kind: Kind) -> usize {
        match kind {
            Kind::Module => self.module_clients,
            Kind::Fair => self.fair_clients,
        }
    }
}

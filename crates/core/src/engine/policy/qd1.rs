//! The single issuer (`qd1`) of Linux 7.1's `zoned_qd1_writes=1`: plugs with pending
//! operations wait on one FIFO list; the issuer drains the head plug completely, one
//! zone write of the whole device out at a time, then takes the next. A plug that
//! gets new work while not listed goes to the tail. The list mechanics are in
//! `issuer.rs`; this file is the FIFO choice.

use super::IssuePolicy;
use super::issuer::Choice;

/// The kernel's choice: always the oldest listed plug.
#[derive(Debug, Default)]
pub(crate) struct Fifo;

impl Choice for Fifo {
    fn kind(&self) -> IssuePolicy {
        IssuePolicy::Qd1
    }
}

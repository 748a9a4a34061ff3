//! Which checks a simulation raises violations from (`SimChecks`): all by default;
//! the mutation check switches some off to show what the others catch alone
//! (docs/vopr.md, "The mutation check").

/// Checks a run can do without, to show which of the others catch a planted bug
/// (all on by default). Whatever is off still follows the run (the models keep
/// their state); only its violations are not raised.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SimChecks {
    /// The engines' and the stack's own invariants (the engines' checks of
    /// themselves at idle among them).
    pub engine_invariants: bool,
    /// The checker (`checker.rs`): requests against the device's limits and flags,
    /// writes in flight per zone, plugs against the device, data read and written,
    /// durability at a power loss.
    pub checker: bool,
    /// The reference model (`oracle.rs`): the device model and the host model.
    pub model: bool,
    /// The host model's "a successful FLUSH reached the device".
    pub host_flush: bool,
    /// The host model's "every failed BIO's errno is the kernel's for its status".
    pub host_errno: bool,
}

impl Default for SimChecks {
    fn default() -> SimChecks {
        SimChecks { engine_invariants: true, checker: true, model: true, host_flush: true, host_errno: true }
    }
}

impl SimChecks {
    /// Only the reference model (the device and the host models) raises violations.
    pub const MODEL_ONLY: SimChecks =
        SimChecks { engine_invariants: false, checker: false, model: true, host_flush: true, host_errno: true };
    /// Only the checker raises violations.
    pub const CHECKER_ONLY: SimChecks =
        SimChecks { engine_invariants: false, checker: true, model: false, host_flush: false, host_errno: false };
    /// Only the engines' and the stack's own invariants raise violations.
    pub const INVARIANTS_ONLY: SimChecks =
        SimChecks { engine_invariants: true, checker: false, model: false, host_flush: false, host_errno: false };
    /// Everything but the engines' and the stack's own invariants.
    pub const INDEPENDENT: SimChecks =
        SimChecks { engine_invariants: false, checker: true, model: true, host_flush: true, host_errno: true };
}

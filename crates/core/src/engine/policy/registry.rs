//! The issue policies, described once: for each, its name (as the command line and
//! JSON spell it), a one-line summary, what it allows (whether its zone writes go
//! through plugs, whether one issuer drains the device's plugs, how many writes of a
//! zone it lets out and whether they are acknowledged in zone order, whether it
//! drains every plug on its own), and the properties every list of policies chooses
//! by: which `zoned_qd1_writes` value selects it, whether it needs a zoned device,
//! whether it is only a baseline that breaks zone writes.
//!
//! What a policy allows reaches the rest of zblk as [`PolicyTraits`], which the
//! engine computes when the policy is set: the engine, the simulator's checker and
//! the command line read the traits, never which policy runs.
//!
//! [`POLICIES`] is the one table: the CLI's `--policy` values and help, the policies
//! a sweep or a random simulation compares, and the default policy of a device
//! ([`IssuePolicy::default_for`]) all derive from it, so a new policy is on the
//! command line, in the sweeps and in the random simulations as soon as it has its
//! entry here.

/// How zone writes are released from their plugs to the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IssuePolicy {
    /// Per-zone plugging (`zwp`): at most one write in flight per sequential zone,
    /// zones independent of each other. The kernel's default since 6.10.
    Zwp,
    /// Single issuer (`qd1`, the kernel's `zoned_qd1_writes=1`): one write of the
    /// whole device in flight; plugs with pending writes wait on a FIFO list and the
    /// issuer drains the head plug completely before moving to the next.
    Qd1,
    /// zblk's single issuer (`batch`): as `qd1`, but the next plug to drain is the one
    /// with the most data waiting (the largest batch per zone visit, so the fewest
    /// head switches per byte); among equals, the nearest zone ahead of the last one
    /// drained (a C-SCAN sweep, so the switches that remain are short seeks). A plug
    /// passed over `batch_max_bypass` times goes first: the bound keeps a shallow
    /// plug's writes from waiting behind more than that many other plugs' drains.
    Batch,
    /// Legacy zone write locking (`zwl`): no plugs; a request-level zone lock inside
    /// an mq-deadline-like scheduler with a limited number of tags. See `zwl.rs`.
    Zwl,
    /// No plugging at all: writes go to the device as submitted, with no write
    /// pointer check and no zone append emulation. Only for measuring what plugging
    /// costs, and for showing what goes wrong without it.
    Passthrough,
    /// Zone write pipelining (`pipeline`): as per-zone plugging, but up to
    /// `pipeline_depth` writes of one zone on the device at once, acknowledged in
    /// zone order. Only on a device that keeps a zone's writes in the order it is
    /// handed them (an image, the memory device): see `engine/pipe.rs`.
    Pipeline,
}

/// What zblk knows of one issue policy besides its implementation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PolicyInfo {
    /// The policy.
    pub policy: IssuePolicy,
    /// Its short name on the command line and in JSON (`zwp`, `qd1`, ...).
    pub name: &'static str,
    /// What it does, in a few words (the `--policy` help lists them).
    pub summary: &'static str,
    /// Zone writes go through zone write plugs (the engine tracks `wp_offset` and
    /// emulates zone append for it).
    pub plugs: bool,
    /// One context issues every zone write of the device.
    pub single_issuer: bool,
    /// How many writes of one zone it lets reach the device at once.
    pub zone_writes: ZoneWrites,
    /// The most zone writes of the whole device (resets and finishes counted with
    /// them) it lets out at once, if it caps them: 1 for a single issuer. The
    /// policy keeps to it by draining plugs with `PolicyCtx::drain_front_within`.
    pub device_zone_writes: Option<u32>,
    /// It treats every plug on its own (per-zone plugging): it keeps no state about
    /// plugs, a changed plug only has its front released, and the engine does that
    /// itself, skipping the policy (see [`PolicyTraits::independent_plugs`]).
    pub independent_plugs: bool,
    /// The value of the kernel's `zoned_qd1_writes` attribute that selects it, if
    /// any: writing the value switches to it, and a zoned device starts with 1's
    /// policy if it is rotational, 0's otherwise.
    pub zoned_qd1_writes: Option<u8>,
    /// It runs on zoned devices only (mq-deadline locks zones of zoned devices).
    pub zoned_only: bool,
    /// Only a baseline that breaks zone writes (for measuring what plugging costs):
    /// sweeps and random simulations, which compare policies that keep zone writes
    /// in order, leave it out.
    pub baseline: bool,
    /// It needs a device that keeps a zone's writes in the order it was handed them
    /// (several out at once): refused on others, left out of the comparisons on
    /// simulated disks (which may reorder).
    pub ordered_device: bool,
}

/// How many writes of one zone a policy lets reach the device at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ZoneWrites {
    /// As many as are submitted: nothing orders a zone's writes (no plugging).
    Unlimited,
    /// One: the next waits for the previous one's completion (a zone write plug,
    /// or zone write locking's zone lock).
    One,
    /// Up to the pipeline depth, acknowledged in zone order; a failed one fails the
    /// writes behind it in its zone (`engine/pipe.rs`).
    Pipelined,
}

/// What an engine's policy allows, as every check outside the policies reads it:
/// the registry's declaration ([`PolicyInfo`]) with the engine's configuration
/// applied (the pipeline depth). The engine computes it when the policy is set
/// ([`crate::engine::Engine::policy_traits`]), so that nothing outside `policy/`
/// needs to know which policy runs to know what it may see.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PolicyTraits {
    /// The policy (for messages; checks read the fields below).
    pub policy: IssuePolicy,
    /// Zone writes go through zone write plugs: the engine tracks write pointers,
    /// emulates zone append, and the device never sees a plugged write off its
    /// zone's write pointer.
    pub plugs: bool,
    /// One write of the whole device is out at a time (`zoned_qd1_writes` reads 1).
    pub single_issuer: bool,
    /// Every plug is drained on its own: the engine releases a changed plug's front
    /// itself, issues a write to an idle, empty plug without queueing it and
    /// queues a write to a busy plug without asking the policy, as the kernel's
    /// per-zone plugging does.
    pub independent_plugs: bool,
    /// The most writes of one zone out at once: 1, or the pipeline depth; `None`
    /// when nothing limits them (no plugging).
    pub zone_writes_in_flight: Option<usize>,
    /// The most zone writes of the whole device out at once, if the policy caps
    /// them (the registry's `device_zone_writes`: 1 for a single issuer).
    pub device_zone_writes_in_flight: Option<usize>,
    /// Several writes of a zone may be out at once and are acknowledged in zone
    /// order: a failed write fails the writes behind it, even those the device
    /// took already (they arrive off the write pointer).
    pub acks_in_zone_order: bool,
}

impl PolicyTraits {
    /// The traits of `cfg.policy` under `cfg`: a pipelining policy lets
    /// `pipeline_depth` writes of a zone out (0: the device's queue depth).
    pub fn of(cfg: &crate::engine::EngineConfig) -> PolicyTraits {
        let info = cfg.policy.info();
        let zone_writes_in_flight = match (info.zone_writes, cfg.pipeline_depth) {
            (ZoneWrites::Unlimited, _) => None,
            (ZoneWrites::One, _) => Some(1),
            (ZoneWrites::Pipelined, 0) => Some(cfg.queue_depth as usize),
            (ZoneWrites::Pipelined, d) => Some(d as usize),
        };
        PolicyTraits {
            policy: cfg.policy,
            plugs: info.plugs,
            single_issuer: info.single_issuer,
            independent_plugs: info.independent_plugs,
            zone_writes_in_flight,
            device_zone_writes_in_flight: info.device_zone_writes.map(|n| n as usize),
            acks_in_zone_order: info.zone_writes == ZoneWrites::Pipelined,
        }
    }
}

/// Every policy, in the order every list shows them (`IssuePolicy as usize` indexes
/// it).
pub const POLICIES: &[PolicyInfo] = &[
    PolicyInfo {
        policy: IssuePolicy::Zwp,
        name: "zwp",
        summary: "per-zone plugging",
        plugs: true,
        single_issuer: false,
        zone_writes: ZoneWrites::One,
        device_zone_writes: None,
        independent_plugs: true,
        zoned_qd1_writes: Some(0),
        zoned_only: false,
        baseline: false,
        ordered_device: false,
    },
    PolicyInfo {
        policy: IssuePolicy::Qd1,
        name: "qd1",
        summary: "single issuer, FIFO",
        plugs: true,
        single_issuer: true,
        zone_writes: ZoneWrites::One,
        device_zone_writes: Some(1),
        independent_plugs: false,
        zoned_qd1_writes: Some(1),
        zoned_only: false,
        baseline: false,
        ordered_device: false,
    },
    PolicyInfo {
        policy: IssuePolicy::Batch,
        name: "batch",
        summary: "single issuer draining the deepest plug first",
        plugs: true,
        single_issuer: true,
        zone_writes: ZoneWrites::One,
        device_zone_writes: Some(1),
        independent_plugs: false,
        zoned_qd1_writes: None,
        zoned_only: false,
        baseline: false,
        ordered_device: false,
    },
    PolicyInfo {
        policy: IssuePolicy::Zwl,
        name: "zwl",
        summary: "legacy zone write locking under an mq-deadline-like scheduler",
        plugs: false,
        single_issuer: false,
        zone_writes: ZoneWrites::One,
        device_zone_writes: None,
        independent_plugs: false,
        zoned_qd1_writes: None,
        zoned_only: true,
        baseline: false,
        ordered_device: false,
    },
    PolicyInfo {
        policy: IssuePolicy::Passthrough,
        name: "passthrough",
        summary: "no plugging",
        plugs: false,
        single_issuer: false,
        zone_writes: ZoneWrites::Unlimited,
        device_zone_writes: None,
        independent_plugs: false,
        zoned_qd1_writes: None,
        zoned_only: false,
        baseline: true,
        ordered_device: false,
    },
    PolicyInfo {
        policy: IssuePolicy::Pipeline,
        name: "pipeline",
        summary: "several writes per zone in flight, acknowledged in zone order (images, memory)",
        plugs: true,
        single_issuer: false,
        zone_writes: ZoneWrites::Pipelined,
        device_zone_writes: None,
        independent_plugs: true,
        zoned_qd1_writes: None,
        zoned_only: false,
        baseline: false,
        ordered_device: true,
    },
];

impl IssuePolicy {
    /// Every policy, in [`POLICIES`]' order.
    pub const ALL: [IssuePolicy; POLICIES.len()] = {
        let mut all = [IssuePolicy::Zwp; POLICIES.len()];
        let mut i = 0;
        while i < POLICIES.len() {
            all[i] = POLICIES[i].policy;
            i += 1;
        }
        all
    };

    /// Its entry in [`POLICIES`].
    pub fn info(self) -> &'static PolicyInfo {
        let info = &POLICIES[self as usize];
        assert_eq!(info.policy, self, "POLICIES is in the enum's order");
        info
    }

    /// The short name used on the command line and in JSON (`zwp`, `qd1`, ...).
    pub fn name(self) -> &'static str {
        self.info().name
    }

    /// Parses a policy name.
    pub fn parse(name: &str) -> Option<IssuePolicy> {
        IssuePolicy::ALL.into_iter().find(|p| p.name() == name)
    }

    /// Whether zone writes go through zone write plugs.
    pub fn plugs(self) -> bool {
        self.info().plugs
    }

    /// Whether one context issues every zone write of the device.
    pub fn single_issuer(self) -> bool {
        self.info().single_issuer
    }

    /// How many writes of one zone it lets reach the device at once.
    pub fn zone_writes(self) -> ZoneWrites {
        self.info().zone_writes
    }

    /// The policy `zoned_qd1_writes` selects when it is 1 (`qd1` true: the single
    /// issuer) or 0 (per-zone plugging).
    pub fn selected_by_zoned_qd1_writes(qd1: bool) -> IssuePolicy {
        let value = u8::from(qd1);
        let info = POLICIES.iter().find(|i| i.zoned_qd1_writes == Some(value));
        info.expect("zoned_qd1_writes 0 and 1 each select a policy").policy
    }

    /// The policy a device runs with unless told otherwise: as the kernel's
    /// `zoned_qd1_writes` default, the single issuer on a rotational zoned device
    /// (where a second write in flight costs a seek); zone write pipelining on any
    /// other zoned device that keeps a zone's writes in the order it is handed them
    /// (an image, the memory device: nothing there asks for one write per zone);
    /// per-zone plugging otherwise.
    pub fn default_for(zoned: bool, rotational: bool, keeps_zone_order: bool) -> IssuePolicy {
        match (zoned, rotational, keeps_zone_order) {
            (true, false, true) => IssuePolicy::Pipeline,
            _ => IssuePolicy::selected_by_zoned_qd1_writes(zoned && rotational),
        }
    }

    /// Whether it needs a device that keeps a zone's writes in the order it was
    /// handed them.
    pub fn needs_ordered_device(self) -> bool {
        self.info().ordered_device
    }

    /// Whether a device may run it: `None` if so, else why not. A policy that
    /// pipelines writes needs a device that declares it keeps them in order.
    pub fn refusal_on(self, keeps_zone_order: bool) -> Option<String> {
        (self.needs_ordered_device() && !keeps_zone_order).then(|| {
            format!(
                "policy {} needs a device that keeps a zone's writes in the order it is handed them \
                 (an image, the memory device); this device may reorder them, so a second write \
                 of a zone in flight could reach the medium first and fail unaligned",
                self.name()
            )
        })
    }

    /// The policies that keep zone writes in order (every one but the baselines), in
    /// [`POLICIES`]' order: what a sweep or a random simulation of simulated disks
    /// compares (so not pipelining, which needs a device that keeps order).
    pub fn compared() -> Vec<IssuePolicy> {
        POLICIES.iter().filter(|i| !i.baseline && !i.ordered_device).map(|i| i.policy).collect()
    }

    /// [`IssuePolicy::compared_on`], and on a device that keeps a zone's writes in
    /// order (an image: `zblk vopr --runtime`) the policies that need one too.
    pub fn compared_on_device(zoned: bool, keeps_zone_order: bool) -> Vec<IssuePolicy> {
        let ok = |i: &&PolicyInfo| !i.baseline && (zoned || !i.zoned_only) && (keeps_zone_order || !i.ordered_device);
        POLICIES.iter().filter(ok).map(|i| i.policy).collect()
    }

    /// [`IssuePolicy::compared`] on a device that is zoned or not: zone write
    /// locking needs a zoned one.
    pub fn compared_on(zoned: bool) -> Vec<IssuePolicy> {
        IssuePolicy::compared().into_iter().filter(|p| zoned || !p.info().zoned_only).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_in_the_enums_order_and_names_are_unique() {
        for (i, info) in POLICIES.iter().enumerate() {
            assert_eq!(info.policy as usize, i, "{}", info.name);
            assert_eq!(IssuePolicy::parse(info.name), Some(info.policy));
        }
    }

    #[test]
    fn a_single_issuer_is_a_device_wide_cap_of_one() {
        for info in POLICIES {
            assert_eq!(info.single_issuer, info.device_zone_writes == Some(1), "{}", info.name);
            assert_ne!(info.device_zone_writes, Some(0), "{}: a cap of 0 issues nothing", info.name);
        }
    }

    #[test]
    fn the_default_is_the_single_issuer_on_a_rotational_zoned_device_and_pipelining_where_order_is_kept() {
        for keeps in [false, true] {
            assert_eq!(IssuePolicy::default_for(true, true, keeps), IssuePolicy::Qd1);
            assert_eq!(IssuePolicy::default_for(false, true, keeps), IssuePolicy::Zwp);
            assert_eq!(IssuePolicy::default_for(false, false, keeps), IssuePolicy::Zwp);
        }
        assert_eq!(IssuePolicy::default_for(true, false, false), IssuePolicy::Zwp);
        assert_eq!(IssuePolicy::default_for(true, false, true), IssuePolicy::Pipeline);
        assert_eq!(IssuePolicy::selected_by_zoned_qd1_writes(true), IssuePolicy::Qd1);
    }

    #[test]
    fn comparisons_leave_the_baseline_out_and_zwl_off_regular_devices() {
        use IssuePolicy::*;
        assert_eq!(IssuePolicy::compared(), vec![Zwp, Qd1, Batch, Zwl]);
        assert_eq!(IssuePolicy::compared_on(false), vec![Zwp, Qd1, Batch]);
        assert_eq!(IssuePolicy::compared_on_device(true, true), vec![Zwp, Qd1, Batch, Zwl, Pipeline]);
        assert_eq!(IssuePolicy::compared_on_device(false, false), vec![Zwp, Qd1, Batch]);
    }
}

//! The sans-IO core: validation, splitting, zone write plugs, zone append emulation,
//! write pointer recovery and issue policies, as one state machine ([`Engine`]).
//!
//! Nothing here reads a clock, sleeps, spawns a thread or touches a file: inputs go
//! in through [`Engine::submit`], [`Engine::complete`] and [`Engine::zone_report`];
//! what to do comes out of [`Engine::poll_action`].

mod machine;
mod plug;

mod zwl;

pub use crate::split::SplitLimits;
pub use machine::{
    Action, AttrError, Engine, EngineConfig, EngineStats, IssuePolicy, PlugView, WpRecovery, ZeroingMethod,
    validate_bio,
};

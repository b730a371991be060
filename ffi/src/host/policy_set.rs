//! [`PolicySet`]: named catalog policies per role, from one JSON document.

use std::sync::Arc;

use libroute_core::Role;
use libroute_core::catalog_config::PolicySetConfig;

use crate::host::Policy;
use crate::host::policy::{catalog_status, parse_json};
use crate::status::Failure;

/// The policies of a set, one per role, and their instance names: the value behind a
/// `libroute_policy_set`. Each policy is shared (`Arc`), so it may outlive the set.
#[derive(Debug)]
pub struct PolicySet {
    /// In `libroute_role` order.
    policies: [Arc<Policy>; 4],
    names: [String; 4],
}

/// The roles in `libroute_role` order: a role's value is its slot.
const ROLES: [Role; 4] = [Role::Prefill, Role::Decode, Role::Aggregated, Role::Encode];

fn slot(role: Role) -> usize {
    role as usize
}

impl PolicySet {
    /// A policy set from JSON: `{"instances": [{"name": ..., "policy": {"type": ...}}],
    /// "roles": {"prefill": name, "decode": name, "aggregated": name, "encode": name}}`. Omitted
    /// roles use the default policy.
    ///
    /// # Errors
    ///
    /// `INVALID_JSON`; `UNKNOWN_KEY` (an unknown key or policy type, named); `INVALID_KNOB` (an
    /// invalid parameter, a duplicate instance name, a role naming no instance; the sentence
    /// names the instance and the parameter).
    pub fn from_json(json: &[u8]) -> Result<Self, Failure> {
        let config: PolicySetConfig = parse_json(json)?;
        let set = config
            .build()
            .map_err(|e| Failure::new(catalog_status(&e), format_args!("policy set: {e}")))?;
        Ok(PolicySet {
            policies: ROLES.map(|r| Arc::new(Policy::catalog(set.policy(r).clone()))),
            // Instance names come from JSON strings, which may hold a NUL; cut there, so the C
            // ABI's NUL-terminated copy is the whole name.
            names: ROLES.map(|r| {
                let name = set.instance_name(r);
                name.split('\0').next().unwrap_or_default().to_owned()
            }),
        })
    }

    /// The policy serving `role`.
    #[must_use]
    pub fn policy(&self, role: Role) -> &Arc<Policy> {
        &self.policies[slot(role)]
    }

    /// The name of the instance serving `role` (`"default"` for an unassigned role).
    #[must_use]
    pub fn instance_name(&self, role: Role) -> &str {
        &self.names[slot(role)]
    }
}

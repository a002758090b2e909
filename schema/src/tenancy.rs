//! A caller's role in a tenant and a tenant's status: defined once, for the REST API (where they
//! are the OpenAPI components `UserRole` and `TenantStatus`), the store (as the text in
//! `memberships.role`, `api_keys.role` and `tenants.status`) and the tool permissions (RBAC).

use std::fmt;

use serde::{Deserialize, Serialize};

// A user's role in a tenant (and an API key's): a member, or a tenant admin. (A plain comment:
// a doc comment would become the schema's description and change `/openapi.json`.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = UserRole))]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Admin,
    Member,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Member => "member",
        }
    }

    /// The role [`Role::as_str`] names; `None` for anything else.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "admin" => Some(Role::Admin),
            "member" => Some(Role::Member),
            _ => None,
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

// Whether a tenant may act. (Not a doc comment, as above.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum TenantStatus {
    Active,
    /// Every key of the tenant answers 403 `tenant_suspended`.
    Suspended,
}

impl TenantStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            TenantStatus::Active => "active",
            TenantStatus::Suspended => "suspended",
        }
    }

    /// The status [`TenantStatus::as_str`] names; `None` for anything else.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "active" => Some(TenantStatus::Active),
            "suspended" => Some(TenantStatus::Suspended),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_match_the_wire() {
        for role in [Role::Admin, Role::Member] {
            assert_eq!(Role::parse(role.as_str()), Some(role));
            assert_eq!(
                serde_json::to_value(role).unwrap(),
                serde_json::Value::from(role.as_str())
            );
            assert_eq!(role.to_string(), role.as_str());
        }
        for status in [TenantStatus::Active, TenantStatus::Suspended] {
            assert_eq!(TenantStatus::parse(status.as_str()), Some(status));
            assert_eq!(
                serde_json::to_value(status).unwrap(),
                serde_json::Value::from(status.as_str())
            );
        }
        assert_eq!(Role::parse("Admin"), None);
        assert_eq!(Role::parse("owner"), None);
        assert_eq!(TenantStatus::parse("deleted"), None);
    }
}

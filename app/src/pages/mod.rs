//! One page per file.

pub mod overview;
pub mod quota_account;
pub mod quotas;
pub mod users;

pub use overview::OverviewPage;
pub use quota_account::QuotaAccountPage;
pub use quotas::QuotasPage;
pub use users::UsersPage;

//! One page per file.

pub mod deliveries;
pub mod overview;
pub mod quota_account;
pub mod quotas;
pub mod users;

pub use deliveries::{BreakersPage, DeliveriesPage, DeliveryPage, MerchantsPage};
pub use overview::OverviewPage;
pub use quota_account::QuotaAccountPage;
pub use quotas::QuotasPage;
pub use users::UsersPage;

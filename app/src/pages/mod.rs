//! One page per file.

pub mod audit;
pub mod deliveries;
pub mod limits;
pub mod overview;
pub mod quotas;
pub mod simulator;
pub mod users;

pub use audit::AuditPage;
pub use deliveries::{BreakersPage, DeliveriesPage, DeliveryPage, MerchantsPage};
pub use limits::LimitsPage;
pub use overview::OverviewPage;
pub use quotas::{QuotaAccountPage, QuotasPage};
pub use simulator::SimulatorPage;
pub use users::UsersPage;

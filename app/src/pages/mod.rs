//! One page per file.

pub mod audit;
pub mod limits;
mod overview;
pub mod simulator;
pub mod users;

pub use audit::AuditPage;
pub use limits::LimitsPage;
pub use overview::OverviewPage;
pub use simulator::SimulatorPage;
pub use users::UsersPage;

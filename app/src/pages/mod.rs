//! One page per file.

pub mod deliveries;
mod overview;
pub mod users;

pub use deliveries::{BreakersPage, DeliveriesPage, DeliveryPage, MerchantsPage};
pub use overview::OverviewPage;
pub use users::UsersPage;

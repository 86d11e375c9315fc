//! One page per file.

mod overview;
pub mod users;

pub use overview::OverviewPage;
pub use users::UsersPage;

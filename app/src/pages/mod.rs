//! One page per file.

mod overview;

pub use overview::OverviewPage;

//! `sqlx::migrate!` embeds the migration files at compile time but cannot
//! tell Cargo about them on stable Rust, so a new migration would not reach
//! an incrementally built binary. This makes Cargo rebuild when they change.

fn main() {
    println!("cargo:rerun-if-changed=../migrations");
}

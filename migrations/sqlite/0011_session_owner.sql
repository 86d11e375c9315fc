-- Sessions know their user and when they began, so that signing out, a role
-- change or a new password can end every session of that user, and a
-- session ends a fixed time after sign-in however busy it is (absolute
-- lifetime) as well as after inactivity. Sessions from before this change
-- have neither, so they end here: everyone signs in once more.
DELETE FROM sessions;
ALTER TABLE sessions ADD COLUMN user_id TEXT;
ALTER TABLE sessions ADD COLUMN created_at BIGINT NOT NULL DEFAULT 0;
CREATE INDEX sessions_user_id ON sessions (user_id);

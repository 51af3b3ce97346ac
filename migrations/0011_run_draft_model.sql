-- The draft model a run drafted with (draft and auto modes), as JSON: name, path, weight format.
-- NULL when none was loaded, and for runs recorded before.
ALTER TABLE runs ADD COLUMN draft_model TEXT;

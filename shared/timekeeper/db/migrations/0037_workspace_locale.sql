-- A workspace's locale: how the files its recipients get write money and numbers (Babel's
-- CLDR locale identifier, language and optional territory, e.g. en_US, de_DE, fr_CH);
-- the application checks it names a locale CLDR knows. Every workspace starts in en_US.
-- PostgreSQL 15 compatible.
ALTER TABLE workspaces
    ADD COLUMN locale text NOT NULL DEFAULT 'en_US'
        CHECK (locale ~ '^[a-z]{2,3}(_[A-Z][a-z]{3})?(_([A-Z]{2}|[0-9]{3}))?$');

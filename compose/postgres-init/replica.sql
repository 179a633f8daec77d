-- Run by the postgres image when its data volume is new (compose/docker-compose.yml):
-- the database the replica (`bottler materialize postgres`) writes into.
CREATE DATABASE replica;

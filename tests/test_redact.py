from common.redact import redact


def test_uri_password_is_masked():
    assert redact("postgresql://app:s3cr3t@db:5432/shop") == "postgresql://app:***@db:5432/shop"


def test_uri_without_password_is_unchanged():
    assert redact("postgresql://app@db/shop") == "postgresql://app@db/shop"
    assert redact("http://127.0.0.1:8081/subjects") == "http://127.0.0.1:8081/subjects"


def test_keyword_password_is_masked_quoted_or_not():
    assert redact("host=db password=s3cr3t user=app") == "host=db password=*** user=app"
    assert redact("password='with space' dbname=x") == "password=*** dbname=x"
    assert "s3cr3t" not in redact("PASSWORD = s3cr3t")


def test_password_inside_a_longer_message():
    msg = "cannot connect to postgresql://u:pw%40x@h/db: timeout"
    assert "pw%40x" not in redact(msg)


def test_log_records_are_redacted(caplog):
    import logging

    from common.logs import RedactingFilter

    logger = logging.getLogger("test.redact")
    logger.addFilter(RedactingFilter())
    with caplog.at_level(logging.INFO, logger="test.redact"):
        logger.info("connecting to %s", "postgresql://u:topsecret@h/db")
    assert "topsecret" not in caplog.text
    assert "postgresql://u:***@h/db" in caplog.text


def test_secret_client_properties_on_the_command_line_draw_a_warning():
    from common.redact import mask_properties, passwords_on_command_line

    warnings = passwords_on_command_line(
        ["materialize", "postgres", "-C", "sasl.password=s3cr3t", "-C", "linger.ms=5",
         "--registry-config=basic.auth.user.info=u:pw", "-r", "http://u:pw@registry:8081"])
    assert len(warnings) == 3
    assert "BOTTLER_KAFKA_CONFIG" in warnings[0] and "BOTTLER_REGISTRY_CONFIG" in warnings[1]
    assert "BOTTLER_REGISTRY" in warnings[2]
    assert not any("s3cr3t" in w or "u:pw" in w for w in warnings)
    assert mask_properties({"sasl.password": "x", "basic.auth.user.info": "u:p",
                            "sasl.username": "u"}) == {
        "sasl.password": "***", "basic.auth.user.info": "***", "sasl.username": "u"}

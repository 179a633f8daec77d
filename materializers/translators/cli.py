"""`bottler translate NAME` (registered by bottler/cli.py)."""

from __future__ import annotations

import typer
from confluent_kafka import KafkaException

from common import options
from common.errors import BottlerError
from common.signals import stop_on_signals


def translate(
    name: str = typer.Argument(..., help="An installed translator (entry point of the "
                               "bottler.translators group) or module:attribute.",
                               show_default=False),
    broker: str = options.Broker,
    schema_registry: str = options.SchemaRegistry,
    topic_prefix: str = options.TopicPrefix,
    output_prefix: str | None = typer.Option(
        None, "--output-prefix", help="Prefix of the output topics [default: --topic-prefix]"),
    group_id: str | None = options.group_id(
        None, "Consumer group and transactional id [default: bottler-translate-NAME, "
        "under the topic prefix]"),
    on_poison: str = options.on_poison("what an input that cannot be decoded or translated "
                                       "does"),
    batch_size: int = options.batch_size(500, "Input messages per transaction (at most)."),
    once: bool = options.once(),
    metrics_port: int | None = options.MetricsPort,
    metrics_host: str = options.MetricsHost,
) -> None:
    """Translate captured table changes into business events, exactly once."""
    from materializers.core import poison
    from materializers.translators.loading import load
    from materializers.translators.runner import TranslatorRunner

    poison.checked(on_poison)
    translator = load(name)
    # metrics first: they tell the stack we are up while we wait for the topics
    options.serve_metrics(metrics_port, metrics_host)
    runner = TranslatorRunner(
        translator, bootstrap=broker, registry=schema_registry, topic_prefix=topic_prefix,
        output_prefix=output_prefix, group_id=group_id, on_poison=on_poison,  # type: ignore[arg-type]
        batch_size=batch_size,
    )
    stop = stop_on_signals()
    try:
        if once:
            runner.run_until_caught_up()
        else:
            runner.run(stop)
    except KafkaException as exc:
        raise BottlerError(f"Kafka failed: {exc.args[0].str()}",
                           "check the broker (--broker); a restart resumes from the last "
                           "committed batch") from None

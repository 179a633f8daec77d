"""`bottler translate NAME` (registered by bottler/cli.py)."""

from __future__ import annotations

from pathlib import Path

import typer
from confluent_kafka import KafkaException
from pydantic import Field

from common import options
from common.config import MetricsSettings, load
from common.errors import BottlerError
from common.options import option
from common.signals import stop_on_signals


class TranslateSettings(options.ViewSettings, MetricsSettings):
    output_prefix: str | None = None
    group_id: str | None = None
    batch_size: int = Field(500, ge=1)
    once: bool = False
    join_group: bool = False
    instance_id: str | None = None


def translate(
    name: str = typer.Argument(..., help="An installed translator (entry point of the "
                               "bottler.translators group) or module:attribute.",
                               show_default=False),
    broker: str | None = options.Broker,
    kafka_config: list[str] | None = options.KafkaConfig,
    schema_registry: str | None = options.SchemaRegistry,
    registry_config: list[str] | None = options.RegistryConfig,
    topic_prefix: str | None = options.TopicPrefix,
    output_prefix: str | None = option(
        "--output-prefix", help="Prefix of the output topics [default: --topic-prefix]"),
    group_id: str | None = options.group_id(
        "bottler-translate-NAME, under the topic prefix",
        "Consumer group and transactional id"),
    on_poison: str | None = options.on_poison("what an input that cannot be decoded or "
                                              "translated does"),
    batch_size: int | None = options.batch_size(500, "Input messages per transaction (at "
                                                "most)."),
    once: bool = options.once(),
    join_group: bool = options.join_group(),
    instance_id: str | None = options.instance_id(),
    metrics_port: int | None = options.MetricsPort,
    metrics_host: str | None = options.MetricsHost,
    config: Path | None = options.Config,
) -> None:
    """Translate captured table changes into business events, exactly once."""
    s = load(TranslateSettings, locals(), skip=("name",))
    from materializers.translators.loading import load as load_translator
    from materializers.translators.runner import TranslatorRunner

    translator = load_translator(name)
    s.check_clients()
    # metrics first: they tell the stack we are up while we wait for the topics
    options.serve_metrics(s.metrics_port, s.metrics_host)
    runner = TranslatorRunner(
        translator, bootstrap=s.kafka, registry=s.schema_registry, topic_prefix=s.topic_prefix,
        output_prefix=s.output_prefix, group_id=s.group_id, on_poison=s.on_poison,
        batch_size=s.batch_size, join_group=s.join_group, instance_id=s.instance_id,
    )
    stop = stop_on_signals()
    try:
        if s.once:
            runner.run_until_caught_up()
        else:
            runner.run(stop)
    except KafkaException as exc:
        raise BottlerError(f"Kafka failed: {exc.args[0].str()}",
                           "check the broker (--broker); a restart resumes from the last "
                           "committed batch") from None

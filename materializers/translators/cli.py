"""`bottler translate NAME` (registered by bottler/cli.py)."""

from __future__ import annotations

from typing import Annotated, Literal

import typer
from confluent_kafka import KafkaException
from pydantic import Field

from common import options
from common.config import MetricsSettings
from common.errors import BottlerError
from common.flags import Flag
from common.options import settings_command
from common.signals import stop_on_signals


class TranslateSettings(options.ViewSettings, MetricsSettings):
    output_prefix: Annotated[str | None, Flag(
        "--output-prefix", help="Prefix of the output topics", shown="the topic prefix")] = None
    group_id: Annotated[str | None, options.GROUP_ID.but(
        help="Consumer group and transactional id",
        shown="[prefix.]bottler-translate-NAME")] = None
    on_poison: Annotated[Literal["dead-letter", "stop"], options.ON_POISON.but(
        help="dead-letter or stop: what an input that cannot be decoded or translated does",
    )] = "dead-letter"
    batch_size: Annotated[int, options.BATCH_SIZE.but(
        help="Input messages per transaction (at most).")] = Field(500, ge=1)
    once: Annotated[bool, options.ONCE] = False
    join_group: Annotated[bool, options.JOIN_GROUP] = False
    instance_id: Annotated[str | None, options.INSTANCE_ID] = None
    transaction_timeout: Annotated[float, Flag(
        "--transaction-timeout", help="Seconds before the broker aborts the open transaction "
        "of an instance that died mid-batch (transaction.timeout.ms); until then the output "
        "topics' read_committed readers wait at it. A restart under the same --instance-id "
        "aborts it at once")] = Field(60.0, gt=0, le=900)  # the broker's maximum: 15 min


@settings_command
def translate(
    s: TranslateSettings,
    name: str = typer.Argument(..., help="An installed translator (entry point of the "
                               "bottler.translators group) or module:attribute.",
                               show_default=False),
) -> None:
    """Translate captured table changes into business events, exactly once."""
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
        transaction_timeout_ms=round(s.transaction_timeout * 1000),
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

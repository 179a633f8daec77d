// A JVM consumer of bottler's topics with Apicurio Registry's Avro deserializer, set for
// Confluent's framing (a zero byte, then the schema's 4-byte id in the payload, no headers):
// tests/test_apicurio.py compiles and runs it against Apicurio as the stack's registry.
//
//   java -cp <apicurio-serde jars>:<dir> ApicurioConsumer BOOTSTRAP REGISTRY TOPIC FIELD...
//
// REGISTRY is Apicurio's own API (http://host:port/apis/registry/v3): the deserializer reads
// schemas by content id there, the ids Apicurio's Confluent-compatible API hands out. Prints,
// per message up to the topic's end, its key's fields, then the value's FIELDs (or "null" for
// a tombstone), tab-separated.

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.stream.Collectors;

import org.apache.avro.generic.GenericRecord;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;

public class ApicurioConsumer {
    public static void main(String[] args) {
        String bootstrap = args[0], registry = args[1], topic = args[2];
        List<String> fields = List.of(args).subList(3, args.length);
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("group.id", "apicurio-consumer-" + System.nanoTime());
        props.put("enable.auto.commit", "false");
        props.put("isolation.level", "read_committed");
        props.put("key.deserializer", "io.apicurio.registry.serde.avro.AvroKafkaDeserializer");
        props.put("value.deserializer", "io.apicurio.registry.serde.avro.AvroKafkaDeserializer");
        props.put("apicurio.registry.url", registry);
        // Confluent's framing: the id in the payload, 4 bytes, a content id
        props.put("apicurio.registry.headers.enabled", "false");
        props.put("apicurio.registry.id-handler", "io.apicurio.registry.serde.Default4ByteIdHandler");
        props.put("apicurio.registry.use-id", "contentId");
        try (KafkaConsumer<GenericRecord, GenericRecord> consumer = new KafkaConsumer<>(props)) {
            List<TopicPartition> partitions = consumer.partitionsFor(topic).stream()
                .map(p -> new TopicPartition(topic, p.partition())).collect(Collectors.toList());
            consumer.assign(partitions);
            consumer.seekToBeginning(partitions);
            Map<TopicPartition, Long> ends = consumer.endOffsets(partitions);
            long deadline = System.currentTimeMillis() + 120_000;
            while (partitions.stream().anyMatch(tp -> consumer.position(tp) < ends.get(tp))) {
                if (System.currentTimeMillis() > deadline) {
                    throw new IllegalStateException("the end of " + topic + " not reached in 120 s");
                }
                for (ConsumerRecord<GenericRecord, GenericRecord> record : consumer.poll(Duration.ofSeconds(1))) {
                    List<String> line = new ArrayList<>();
                    record.key().getSchema().getFields().forEach(f -> line.add(String.valueOf(record.key().get(f.name()))));
                    for (String field : fields) {
                        line.add(record.value() == null ? "null" : String.valueOf(record.value().get(field)));
                    }
                    System.out.println(String.join("\t", line));
                }
            }
        }
    }
}

// One OpenSearch node in this JVM for the embedded stack (compose/search_engine.py), started
// through codelibs' OpenSearchRunner, which loads the modules from the classpath. The runner's
// own main() picks its HTTP port itself and hides why a start failed: this one takes every
// setting from <home>/config/opensearch.yml, written by the stack, and says what failed.
//
//     java -cp '<jars>/*:<jars>/classes' BottlerSearchEngine <home>

import java.nio.file.Path;
import java.nio.file.Paths;

import org.codelibs.opensearch.runner.OpenSearchRunner;
import org.opensearch.common.settings.Settings;

public final class BottlerSearchEngine {

    public static void main(final String[] args) throws Exception {
        if (args.length != 1) {
            System.err.println("usage: BottlerSearchEngine <home>");
            System.exit(2);
        }
        final Path home = Paths.get(args[0]).toAbsolutePath();
        final Path config = home.resolve("config");
        final Settings settings = Settings.builder()
                .loadFromPath(config.resolve("opensearch.yml")).build();
        final OpenSearchRunner runner = new OpenSearchRunner();
        runner.setMaxHttpPort(-1); // the port is the stack's choice, taken as it is
        runner.onBuild((number, builder) -> builder.put(settings));
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            try {
                runner.close();
            } catch (final Exception e) {
                System.err.println("closing the node failed: " + e);
            }
        }));
        try {
            runner.build("-basePath", home.toString(), "-confPath", config.toString(),
                    "-numOfNode", "1", "-clusterName", settings.get("cluster.name", "bottler"));
        } catch (final RuntimeException e) {
            Throwable cause = e;
            while (cause.getCause() != null) {
                cause = cause.getCause();
            }
            System.err.println("ERROR: the search engine did not start: " + cause);
            e.printStackTrace();
            System.exit(1);
        }
        while (!runner.isClosed()) {
            Thread.sleep(1000);
        }
    }
}

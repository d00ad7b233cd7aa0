// Starts AWS DynamoDB Local bound to 127.0.0.1 only.
//
// DynamoDB Local has no option to choose its listening address and binds every interface.
// This launcher builds the server from the usual command-line arguments, sets the host of
// its Jetty connectors to the loopback address, then starts it. Java's single-file source
// mode runs it without a build step:
//
//   java -cp "DynamoDBLocal.jar:DynamoDBLocal_lib/*" -Djava.library.path=DynamoDBLocal_lib \
//        LoopbackDynamoDBLocal.java -inMemory -sharedDb -disableTelemetry -port 8000
import com.amazonaws.services.dynamodbv2.local.main.ServerRunner;
import com.amazonaws.services.dynamodbv2.local.server.DynamoDBProxyServer;
import java.lang.reflect.Field;
import org.eclipse.jetty.server.Connector;
import org.eclipse.jetty.server.Server;
import org.eclipse.jetty.server.ServerConnector;

public class LoopbackDynamoDBLocal {
    public static void main(String[] args) throws Exception {
        DynamoDBProxyServer proxy = ServerRunner.createServerFromCommandLineArgs(args);
        Field field = DynamoDBProxyServer.class.getDeclaredField("server");
        field.setAccessible(true);
        Server server = (Server) field.get(proxy);
        int bound = 0;
        for (Connector connector : server.getConnectors()) {
            if (connector instanceof ServerConnector) {
                ((ServerConnector) connector).setHost("127.0.0.1");
                bound++;
            }
        }
        if (bound == 0) {
            throw new IllegalStateException("no Jetty connector found to bind to 127.0.0.1");
        }
        proxy.start();
        System.out.println("DynamoDB Local listening on 127.0.0.1");
        proxy.join();
    }
}

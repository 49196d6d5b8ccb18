// A real HDFS (one NameNode, one DataNode) in one JVM, for sparklog's tests.
//
//   java -cp '<hadoop-client-minicluster jars>/*' MiniHdfs.java <base dir> <rpc port> <http port> [permissions]
//
// Every listener is on 127.0.0.1. Prints "READY <rpc port> <http port>" once the
// cluster answers, then runs until its standard input closes (the test process
// that started it ends, or closes the pipe), and shuts the cluster down.
//
// "permissions" turns HDFS's permission checks on (the user who started the JVM is the
// superuser; "/" is 1777, like /tmp, so any user makes their own folder there) and has the
// NameNode issue and accept delegation tokens without Kerberos (a setting Hadoop keeps
// for tests), so a test can tell which user a client acted as.
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.permission.FsPermission;
import org.apache.hadoop.hdfs.MiniDFSCluster;

public class MiniHdfs {
    public static void main(String[] args) throws Exception {
        String base = args[0];
        int rpcPort = Integer.parseInt(args[1]);
        int httpPort = Integer.parseInt(args[2]);
        Configuration conf = new Configuration();
        conf.set(MiniDFSCluster.HDFS_MINIDFS_BASEDIR, base);
        conf.set("hadoop.tmp.dir", base + "/tmp");
        conf.set("dfs.namenode.rpc-address", "127.0.0.1:" + rpcPort);
        conf.set("dfs.namenode.http-address", "127.0.0.1:" + httpPort);
        conf.set("dfs.namenode.rpc-bind-host", "127.0.0.1");
        conf.set("dfs.namenode.http-bind-host", "127.0.0.1");
        conf.set("dfs.datanode.address", "127.0.0.1:0");
        conf.set("dfs.datanode.http.address", "127.0.0.1:0");
        conf.set("dfs.datanode.ipc.address", "127.0.0.1:0");
        conf.set("dfs.datanode.hostname", "127.0.0.1");
        conf.setBoolean("dfs.webhdfs.enabled", true);
        boolean permissions = args.length > 3 && args[3].equals("permissions");
        conf.setBoolean("dfs.permissions.enabled", permissions);
        conf.setBoolean("dfs.namenode.delegation.token.always-use", permissions);
        conf.setInt("dfs.replication", 1);
        // A closed file is on the DataNode's disk (fsync), as a log needs in production.
        conf.setBoolean("dfs.datanode.synconclose", true);
        // A file's close (by the DataNode's own client, for WebHDFS) asks the NameNode to
        // complete it, and with one replica the NameNode says not yet until the DataNode's
        // report of the block arrives (num-committed-allowed needs more expected replicas
        // than dfs.namenode.replication.min: it helps a cluster of replication >= 2, not
        // this one); the client then sleeps initial.delay.ms, doubling. Hadoop's 400 ms made
        // a small commit ~200 ms; 20 ms made every close 20, 40 or 60 ms (quantised,
        // measured); 2 ms makes it ~20 ms, the DataNode's own work. Ten retries keep a
        // sleep budget of ~2 s (20 ms x 5 retries gave 0.6 s) before a close fails.
        conf.setInt("dfs.namenode.file.close.num-committed-allowed", 1);
        conf.setInt("dfs.client.block.write.locateFollowingBlock.initial.delay.ms", 2);
        conf.setInt("dfs.client.block.write.locateFollowingBlock.retries", 10);
        MiniDFSCluster cluster = new MiniDFSCluster.Builder(conf)
                .nameNodePort(rpcPort).nameNodeHttpPort(httpPort)
                .numDataNodes(1).format(true).build();
        cluster.waitActive();
        if (permissions) {
            cluster.getFileSystem().setPermission(new Path("/"), new FsPermission((short) 01777));
        }
        System.out.println("READY " + cluster.getNameNodePort() + " " + httpPort);
        System.out.flush();
        while (System.in.read() != -1) {
            // runs until the parent closes the pipe
        }
        cluster.shutdown();
    }
}

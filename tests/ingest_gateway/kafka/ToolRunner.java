import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.FileDescriptor;
import java.io.FileInputStream;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.io.PrintStream;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Proxy;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * Runs Kafka's command-line tools (their unchanged main classes) one after another in one
 * JVM, as Kafka's own tool tests do, so a test module pays one JVM start, not one per
 * command (tests/ingest_gateway/kafka/tool_runner.py drives it).
 *
 * <p>Protocol on the process's own stdin/stdout, big-endian: a request is an int n, then n
 * modified-UTF-8 strings (the main class, then its arguments), then an int length and that
 * many bytes for the tool's System.in. The answer is the exit status (int), then the
 * tool's stdout and stderr, each an int length and its bytes.
 *
 * <p>A tool's {@code Exit.exit(status)} (Kafka's exit procedure, in
 * {@code org.apache.kafka.common.utils.internals} since 4.x and in
 * {@code org.apache.kafka.common.utils} before) is turned into an exception that ends its
 * main; the first status it asked for is its exit status. A main that returns is 0; an
 * exception out of main is 1 with its stack trace on stderr, as the JVM would give. The
 * hooks a command adds through {@code Exit.addShutdownHook} run when it ends, as its own
 * JVM would run them at exit.
 */
public final class ToolRunner {
    /** Thrown by the exit procedure: unwinds the tool's main. */
    static final class ExitCalled extends RuntimeException {
        ExitCalled(int status) {
            super("exit " + status, null, false, false);
        }
    }

    /** Where System.out/err write: the current command's buffer. */
    static final class Switch extends OutputStream {
        volatile OutputStream target = OutputStream.nullOutputStream();

        @Override public void write(int b) throws IOException { target.write(b); }
        @Override public void write(byte[] b, int off, int len) throws IOException {
            target.write(b, off, len);
        }
    }

    static volatile Integer exitStatus;

    /** The hooks the current command added through Kafka's Exit.addShutdownHook. */
    static final List<Thread> hooks = new ArrayList<>();

    public static void main(String[] ignored) throws Exception {
        DataInputStream in = new DataInputStream(new FileInputStream(FileDescriptor.in));
        DataOutputStream answer = new DataOutputStream(new FileOutputStream(FileDescriptor.out));
        Switch out = new Switch();
        Switch err = new Switch();
        // installed once, before any tool class loads: a logger or a tool that keeps
        // System.out from its first use still writes to the current command's buffer
        System.setOut(new PrintStream(out, true, "UTF-8"));
        System.setErr(new PrintStream(err, true, "UTF-8"));
        interceptExits();
        while (true) {
            int n;
            try {
                n = in.readInt();
            } catch (java.io.EOFException e) {
                return;  // the driver closed its end: done
            }
            String[] words = new String[n];
            for (int i = 0; i < n; i++) {
                words[i] = in.readUTF();
            }
            byte[] stdin = new byte[in.readInt()];
            in.readFully(stdin);
            ByteArrayOutputStream stdout = new ByteArrayOutputStream();
            ByteArrayOutputStream stderr = new ByteArrayOutputStream();
            out.target = stdout;
            err.target = stderr;
            System.setIn(new ByteArrayInputStream(stdin));
            int status = run(words[0], Arrays.copyOfRange(words, 1, n), stderr);
            runHooks();
            System.out.flush();
            System.err.flush();
            out.target = OutputStream.nullOutputStream();
            err.target = OutputStream.nullOutputStream();
            answer.writeInt(status);
            answer.writeInt(stdout.size());
            stdout.writeTo(answer);
            answer.writeInt(stderr.size());
            stderr.writeTo(answer);
            answer.flush();
        }
    }

    static int run(String main, String[] args, ByteArrayOutputStream stderr) {
        exitStatus = null;
        try {
            Class.forName(main).getMethod("main", String[].class).invoke(null, (Object) args);
        } catch (InvocationTargetException e) {
            Throwable cause = e.getCause();
            if (exitStatus == null && !(cause instanceof ExitCalled)) {
                System.err.print("Exception in thread \"main\" ");
                cause.printStackTrace();
                return 1;
            }
        } catch (ReflectiveOperationException e) {
            System.err.println("Error: could not run " + main + ": " + e);
            return 1;
        }
        return exitStatus == null ? 0 : exitStatus;
    }

    /** The command's shutdown hooks, run as its own JVM would run them when it exits
     *  (ConsoleProducer closes its producer in one: without it nothing is sent). */
    static void runHooks() throws InterruptedException {
        List<Thread> started = new ArrayList<>();
        synchronized (hooks) {
            started.addAll(hooks);
            hooks.clear();
        }
        for (Thread hook : started) {
            hook.start();
        }
        for (Thread hook : started) {
            hook.join();
        }
    }

    /** Kafka's Exit.setExitProcedure / setHaltProcedure, through reflection: the class
     *  moved between versions and this file compiles against whichever is on the path. */
    static void interceptExits() throws Exception {
        for (String name : new String[] {"org.apache.kafka.common.utils.internals.Exit",
                                         "org.apache.kafka.common.utils.Exit"}) {
            Class<?> exit;
            try {
                exit = Class.forName(name);
            } catch (ClassNotFoundException e) {
                continue;
            }
            Class<?> procedure = Class.forName(name + "$Procedure");
            Object proxy = implement(procedure, "ToolRunner's exit procedure", margs -> {
                if (exitStatus == null) {
                    exitStatus = (Integer) margs[0];
                }
                throw new ExitCalled((Integer) margs[0]);
            });
            exit.getMethod("setExitProcedure", procedure).invoke(null, proxy);
            exit.getMethod("setHaltProcedure", procedure).invoke(null, proxy);
            Class<?> adder = Class.forName(name + "$ShutdownHookAdder");
            Object keeper = implement(adder, "ToolRunner's shutdown hooks", margs -> {
                Thread hook = new Thread((Runnable) margs[1], (String) margs[0]);
                synchronized (hooks) {
                    hooks.add(hook);
                }
                return null;
            });
            exit.getMethod("setShutdownHookAdder", adder).invoke(null, keeper);
        }
    }

    /** An instance of the one-method interface {@code type} whose method runs {@code body}
     *  on its arguments (Object's own methods answer as an identity would). */
    static Object implement(Class<?> type, String label,
                            java.util.function.Function<Object[], Object> body) {
        return Proxy.newProxyInstance(ToolRunner.class.getClassLoader(), new Class<?>[] {type},
            (self, method, margs) -> {
                switch (method.getName()) {
                    case "hashCode": return System.identityHashCode(self);
                    case "equals": return self == margs[0];
                    case "toString": return label;
                    default: return body.apply(margs);
                }
            });
    }
}

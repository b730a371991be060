package bench;

import java.util.concurrent.TimeUnit;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;

/** One select of 64 candidates from the JVM, average time per call. */
@State(Scope.Thread)
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.NANOSECONDS)
public class SelectBench {
    private Fixture fixture;

    @Setup
    public void setUp() {
        fixture = new Fixture();
    }

    @TearDown
    public void tearDown() {
        fixture.close();
    }

    @Benchmark
    public Object directByteBuffer() {
        return fixture.direct();
    }

    @Benchmark
    public Object uniffiPacked() {
        return fixture.packed();
    }

    @Benchmark
    public Object uniffiRecords() {
        return fixture.records();
    }
}

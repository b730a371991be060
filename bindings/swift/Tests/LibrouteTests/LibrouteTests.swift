// Not compiled on the machines this project's CI runs on (no Swift toolchain there): `cargo xtask
// swift` runs these tests only where `swift` exists and says plainly when it skips them.
import XCTest
@testable import Libroute

final class LibrouteTests: XCTestCase {
    let request = Request(promptTokens: 64, blockSize: 16, role: .aggregated)

    func row(_ id: UInt64, _ blocks: UInt32, effective: Double? = nil) -> Row {
        Row(worker: Worker(workerId: id),
            cache: RowCache(deviceBlocks: blocks, effectiveBlocks: effective ?? Double(blocks),
                            effectiveTokens: UInt64(blocks) * 16))
    }

    func testSelectsTheCachedWorkerWithItsBreakdown() throws {
        let policy = try Policy(json: "{}")
        let selector = try Selector(capacity: 16, entropy: 1)
        let s = try selector.select(policy: policy, request: request, rows: [row(1, 0), row(2, 3)])
        // 4 blocks; worker 2 holds 3: cost 4 - 3 = 1 against 4.
        XCTAssertEqual(s.worker.workerId, 2)
        XCTAssertEqual(s.cost, 1.0)
        XCTAssertEqual(s.contributions, [1.0])
        XCTAssertEqual(try selector.lastCosts(), [Candidate(row: 0, cost: 4.0), Candidate(row: 1, cost: 1.0)])
    }

    func testBadInputThrows() throws {
        XCTAssertThrowsError(try Policy(json: "{\"temperature\": -1}")) { error in
            guard case RouteError.InvalidKnob(let detail) = error else { return XCTFail("\(error)") }
            XCTAssertTrue(detail.contains("temperature"))
        }
        let selector = try Selector(capacity: 1, entropy: 0)
        let policy = try Policy(json: "{}")
        XCTAssertThrowsError(try selector.select(policy: policy, request: request, rows: [row(1, 0), row(2, 0)]))
        XCTAssertThrowsError(try selector.select(policy: policy, request: request, rows: []))
        XCTAssertThrowsError(try selector.select(policy: policy, request: request, rows: [row(1, 1, effective: .nan)]))
        policy.release()
        XCTAssertThrowsError(try selector.select(policy: policy, request: request, rows: [row(1, 0)])) { error in
            guard case RouteError.Closed = error else { return XCTFail("\(error)") }
        }
    }
}

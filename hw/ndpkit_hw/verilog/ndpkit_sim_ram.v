// Simulation RAM behind AxiMemoryModel: one synchronous read port (non-transparent:
// a read in the cycle of a write to the same word returns the old word) and one
// write port with a byte enable per byte.  Hand-written rather than an Amaranth
// Memory because a multi-megabyte Memory takes minutes to convert (its zero
// initialisation is emitted word by word); here it is one loop.  Benches reach the
// contents as the `mem` array (see ndpkit.sim.bench.Backdoor), word by word through
// VPI, or in bulk through a file: set bd_first/bd_last (word indices), bump
// bd_load_req (or bd_dump_req) and let one clock edge pass: the RAM then $freads
// "ndpkit_backdoor.bin" (or $writememh-s "ndpkit_backdoor.hex") in the simulator's
// folder.
module ndpkit_sim_ram #(
    parameter WIDTH = 512,
    parameter DEPTH = 1024,
    parameter ABITS = 10
) (
    input  wire                 clk,
    input  wire                 rd_en,
    input  wire [ABITS-1:0]     rd_addr,
    output reg  [WIDTH-1:0]     rd_data,
    input  wire [WIDTH/8-1:0]   wr_en,
    input  wire [ABITS-1:0]     wr_addr,
    input  wire [WIDTH-1:0]     wr_data
);
    reg [WIDTH-1:0] mem [0:DEPTH-1] /*verilator public_flat_rw*/;
    integer i;
    initial begin
        for (i = 0; i < DEPTH; i = i + 1) mem[i] = {WIDTH{1'b0}};
        rd_data = {WIDTH{1'b0}};
    end
    // bulk backdoor (driven through VPI by the bench; never by the design)
    reg [31:0] bd_first /*verilator public_flat_rw*/ = 0;
    reg [31:0] bd_last /*verilator public_flat_rw*/ = 0;
    reg [31:0] bd_load_req /*verilator public_flat_rw*/ = 0;
    reg [31:0] bd_dump_req /*verilator public_flat_rw*/ = 0;
    reg [31:0] bd_load_done = 0;
    reg [31:0] bd_dump_done = 0;
    integer bd_file, bd_count;
    /* verilator lint_off BLKSEQ */  // file handles are procedural temporaries
    always @(posedge clk) begin
        if (bd_load_req != bd_load_done) begin
            // binary, most significant byte of each word first
            bd_file = $fopen("ndpkit_backdoor.bin", "rb");
            bd_count = $fread(mem, bd_file, bd_first, bd_last - bd_first + 1);
            $fclose(bd_file);
            bd_load_done <= bd_load_req;
        end
        if (bd_dump_req != bd_dump_done) begin
            $writememh("ndpkit_backdoor.hex", mem, bd_first, bd_last);
            bd_dump_done <= bd_dump_req;
        end
    end
    /* verilator lint_on BLKSEQ */

    // one whole-word write per cycle under a byte mask (a single delayed assignment
    // to the array: Verilator then updates one word, not the array)
    wire [WIDTH-1:0] wr_mask;
    genvar g;
    generate
        for (g = 0; g < WIDTH / 8; g = g + 1) begin : byte_mask
            assign wr_mask[g*8 +: 8] = {8{wr_en[g]}};
        end
    endgenerate
    always @(posedge clk) begin
        if (|wr_en) mem[wr_addr] <= (mem[wr_addr] & ~wr_mask) | (wr_data & wr_mask);
        if (rd_en) rd_data <= mem[rd_addr];
    end
endmodule

// Simulation RAM behind AxiMemoryModel: one synchronous read port (non-transparent:
// a read in the cycle of a write to the same word returns the old word) and one
// write port with a byte enable per byte.  Hand-written rather than an Amaranth
// Memory because a multi-megabyte Memory takes minutes to convert (its zero
// initialisation is emitted word by word); here it is one loop.  Benches reach the
// contents as the `mem` array (see ndpkit.sim.bench.Backdoor).
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
    reg [WIDTH-1:0] mem [0:DEPTH-1];
    integer i;
    initial begin
        for (i = 0; i < DEPTH; i = i + 1) mem[i] = {WIDTH{1'b0}};
        rd_data = {WIDTH{1'b0}};
    end
    integer b;
    always @(posedge clk) begin
        for (b = 0; b < WIDTH / 8; b = b + 1)
            if (wr_en[b]) mem[wr_addr][b*8 +: 8] <= wr_data[b*8 +: 8];
        if (rd_en) rd_data <= mem[rd_addr];
    end
endmodule

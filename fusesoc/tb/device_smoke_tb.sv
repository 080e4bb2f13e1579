// Smoke test of the ndpkit device for FuseSoC's `sim` target (Verilator --binary):
// over the AXI4-Lite BAR0 port it reads the id register (the "NDPK" magic of
// spec/ndpkit_spec/shell.py: NDPKIT_MAGIC), the engine presence mask (dma_copy is
// engine kind 1), writes and reads back the scratch register, and reads an offset
// no block decodes (must answer DECERR).  Prints PASS and finishes, or $fatal.
`timescale 1ns/1ps
module device_smoke_tb;
  logic clk = 0, rst = 1;
  always #5 clk = ~clk;

  // BAR0 (AXI4-Lite)
  logic [15:0] s_axil_awaddr = 0, s_axil_araddr = 0;
  logic s_axil_awvalid = 0, s_axil_wvalid = 0, s_axil_bready = 0, s_axil_arvalid = 0, s_axil_rready = 0;
  logic [31:0] s_axil_wdata = 0; logic [3:0] s_axil_wstrb = 0;
  wire s_axil_awready, s_axil_wready, s_axil_bvalid, s_axil_arready, s_axil_rvalid;
  wire [1:0] s_axil_bresp, s_axil_rresp; wire [31:0] s_axil_rdata;
  // host DMA port: idle
  logic [3:0] s_axi_awid = 0, s_axi_arid = 0; logic [31:0] s_axi_awaddr = 0, s_axi_araddr = 0;
  logic [7:0] s_axi_awlen = 0, s_axi_arlen = 0; logic [2:0] s_axi_awsize = 0, s_axi_arsize = 0;
  logic [1:0] s_axi_awburst = 0, s_axi_arburst = 0;
  logic s_axi_awvalid = 0, s_axi_wvalid = 0, s_axi_wlast = 0, s_axi_bready = 1, s_axi_arvalid = 0, s_axi_rready = 1;
  logic [127:0] s_axi_wdata = 0; logic [15:0] s_axi_wstrb = 0;
  wire s_axi_awready, s_axi_wready, s_axi_bvalid, s_axi_arready, s_axi_rvalid, s_axi_rlast;
  wire [3:0] s_axi_bid, s_axi_rid; wire [1:0] s_axi_bresp, s_axi_rresp; wire [127:0] s_axi_rdata;
  // memory port: accepts, never answers (nothing here reads or writes memory)
  wire [3:0] m_axi_mem_awid, m_axi_mem_arid; wire [31:0] m_axi_mem_awaddr, m_axi_mem_araddr;
  wire [7:0] m_axi_mem_awlen, m_axi_mem_arlen; wire [2:0] m_axi_mem_awsize, m_axi_mem_arsize;
  wire [1:0] m_axi_mem_awburst, m_axi_mem_arburst;
  wire m_axi_mem_awvalid, m_axi_mem_wvalid, m_axi_mem_wlast, m_axi_mem_bready, m_axi_mem_arvalid, m_axi_mem_rready;
  wire [127:0] m_axi_mem_wdata; wire [15:0] m_axi_mem_wstrb;
  logic m_axi_mem_awready = 1, m_axi_mem_wready = 1, m_axi_mem_bvalid = 0, m_axi_mem_arready = 1;
  logic m_axi_mem_rvalid = 0, m_axi_mem_rlast = 0;
  logic [3:0] m_axi_mem_bid = 0, m_axi_mem_rid = 0; logic [1:0] m_axi_mem_bresp = 0, m_axi_mem_rresp = 0;
  logic [127:0] m_axi_mem_rdata = 0;
  wire [7:0] usr_irq_req; logic [7:0] usr_irq_ack = 0;

  ndpkit_device dut (.*);

  // the sequence, one BAR0 access per step; handshakes are seen in always blocks
  // (pre-edge values, as the device's flip-flops see them)
  localparam int STEPS = 5;
  logic [2:0] step = 0; logic waiting = 0;
  always @(posedge clk) begin
    if (rst) begin
      step <= 0; waiting <= 0;
    end else if (step < STEPS) begin
      if (!waiting) begin
        waiting <= 1;
        case (step)
          0: begin s_axil_araddr <= 16'h0000; s_axil_arvalid <= 1; end          // id
          1: begin s_axil_araddr <= 16'h000C; s_axil_arvalid <= 1; end          // engines
          2: begin s_axil_awaddr <= 16'h001C; s_axil_awvalid <= 1;              // scratch <- C0FFEE42
                   s_axil_wdata <= 32'hC0FFEE42; s_axil_wstrb <= 4'hF; s_axil_wvalid <= 1; end
          3: begin s_axil_araddr <= 16'h001C; s_axil_arvalid <= 1; end          // scratch
          default: begin s_axil_araddr <= 16'h7000; s_axil_arvalid <= 1; end   // no block there
        endcase
      end else begin
        if (s_axil_arvalid && s_axil_arready) s_axil_arvalid <= 0;
        if (s_axil_awvalid && s_axil_awready) s_axil_awvalid <= 0;
        if (s_axil_wvalid && s_axil_wready) s_axil_wvalid <= 0;
        if (s_axil_rvalid && s_axil_rready) begin
          case (step)
            0: if (s_axil_rresp != 0 || s_axil_rdata != 32'h4E44504B)
                 $fatal(1, "id: %h (resp %0d), expected 4e44504b", s_axil_rdata, s_axil_rresp);
            1: if (s_axil_rresp != 0 || s_axil_rdata[1] != 1'b1)
                 $fatal(1, "engines: %h (resp %0d), dma_copy (kind 1) missing", s_axil_rdata, s_axil_rresp);
            3: if (s_axil_rdata != 32'hC0FFEE42) $fatal(1, "scratch read back %h", s_axil_rdata);
            default: if (s_axil_rresp != 2'b11)
                 $fatal(1, "an undecoded offset answered resp %0d, expected DECERR", s_axil_rresp);
          endcase
          step <= step + 1; waiting <= 0;
        end
        if (s_axil_bvalid && s_axil_bready) begin
          if (s_axil_bresp != 0) $fatal(1, "scratch write answered resp %0d", s_axil_bresp);
          step <= step + 1; waiting <= 0;
        end
      end
    end else begin
      $display("PASS: ndpkit device smoke test");
      $finish;
    end
  end

  initial begin
    s_axil_rready = 1; s_axil_bready = 1;
    repeat (4) @(posedge clk);
    rst <= 0;
  end
  initial begin #200000; $fatal(1, "timeout"); end
endmodule
